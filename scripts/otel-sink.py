"""An OTLP/HTTP receiver for scripts/otel-check.sh: oteltest's `HttpSink` (the server behind
its `otelsink` command), with a handler that writes every span it receives as one JSON line.

Usage: otel-sink.py SPANS.jsonl PORTFILE PORT
PORT 0 picks a free port; the port listened on is written to PORTFILE once the sink is up.
A fixed PORT that is busy exits 3 with a message saying so.
"""

import base64
import json
import logging
import signal
import sys
import threading
import time

from google.protobuf.json_format import MessageToDict
from oteltest.sink import HttpSink, is_port_in_use
from oteltest.sink.handler import RequestHandler

out_path, port_path, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
if port and is_port_in_use(port):
    print(f"otel-sink: port {port} is busy: stop what listens there, or set OTEL_CHECK_PORT=0",
          file=sys.stderr)
    sys.exit(3)


def hex_id(value):
    return base64.b64decode(value).hex() if value else ""


def value_of(any_value):
    for key, v in any_value.items():
        if key == "intValue":
            return int(v)
        return v
    return None


class ToFile(RequestHandler):
    def __init__(self, path):
        self.out = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def handle_trace(self, request, headers):  # noqa: ARG002
        message = MessageToDict(request)
        with self.lock:
            for resource_spans in message.get("resourceSpans", []):
                resource = {a["key"]: value_of(a["value"])
                            for a in resource_spans.get("resource", {}).get("attributes", [])}
                for scope_spans in resource_spans.get("scopeSpans", []):
                    for span in scope_spans.get("spans", []):
                        record = {
                            "service": resource.get("service.name"),
                            "name": span.get("name"),
                            "kind": span.get("kind"),
                            "trace_id": hex_id(span.get("traceId")),
                            "span_id": hex_id(span.get("spanId")),
                            "parent_span_id": hex_id(span.get("parentSpanId")),
                            "attributes": {a["key"]: value_of(a["value"])
                                           for a in span.get("attributes", [])},
                        }
                        self.out.write(json.dumps(record) + "\n")

    def handle_metrics(self, request, headers):  # noqa: ARG002
        pass

    def handle_logs(self, request, headers):  # noqa: ARG002
        pass


logging.basicConfig(level=logging.WARNING)
sink = HttpSink(ToFile(out_path), logging.getLogger("otel-sink"), port=port)
sink.start()
for _ in range(100):
    if sink.httpd is not None:
        break
    time.sleep(0.05)
else:
    print("otel-sink: the HTTP sink did not start", file=sys.stderr)
    sys.exit(1)
with open(port_path + ".tmp", "w") as f:
    f.write(str(sink.httpd.server_address[1]))
import os  # noqa: E402

os.replace(port_path + ".tmp", port_path)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
threading.Event().wait()
