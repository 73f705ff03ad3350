"""A server that answers every GET with the deadline headers it received, one `name: value` per
line: the far end of a chain whose outbound dialects are being checked. Prints its port first."""
import http.server
import sys

NAMES = ("deadline-budget-ms", "grpc-timeout", "connect-timeout-ms",
         "x-envoy-upstream-rq-timeout-ms", "x-request-deadline")


class Mirror(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        lines = "".join(f"{name}: {self.headers[name]}\n" for name in NAMES if name in self.headers)
        body = lines.encode()
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Mirror)
print(server.server_address[1], flush=True)
# Exits when standard input closes, so it never outlives the script that started it.
import threading
threading.Thread(target=server.serve_forever, daemon=True).start()
sys.stdin.read()
