"""Attacks on a `deadline service`, as a hostile client would make them, with real HTTP/2
frames (the `h2` package) over loopback. Each attack is one function, ATTACKS maps its name to
it; add one by writing a function and listing it there.

Each attack starts its own service (the binary in argv[1]), attacks it, and measures what a
client sees, the service's peak RSS (VmHWM from /proc/PID/status), and its tasks and file
descriptors after (GET /debug/runtime). It prints one line of figures and returns the problems
found against its thresholds; with `--no-assert` (a binary without the limit flags: the
"before" figures) nothing is asserted.

Usage: python attack.py BIN [--short] [--no-assert] [ATTACK...]
"""

import json
import os
import resource
import selectors
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

SHORT = "--short" in sys.argv
ASSERT = "--no-assert" not in sys.argv


class Service:
    """A `deadline service` process, with an optional file-descriptor limit."""

    def __init__(self, binary, args, nofile=None, stderr_file=None):
        cmd = [binary, "service", "--name", "target", "--exit-on-stdin-close", *args]
        if nofile:
            cmd = ["bash", "-c", f'ulimit -n {nofile} && exec "$@"', "bash", *cmd]
        # A file, not a pipe, when a test may make the service log more than a pipe holds.
        self.stderr_file = stderr_file
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr_file or subprocess.PIPE,
        )
        line = self.proc.stdout.readline().decode()
        if "://" not in line:
            raise SystemExit(f"the service did not start: {line!r}")
        host, port = line.strip().split("://")[1].split(":")
        self.addr = (host, int(port))

    def status(self, key):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return None

    def peak_rss_mb(self):
        return round(self.status("VmHWM") / 1024, 1)

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def runtime(self, within=5.0):
        """GET /debug/runtime, or None if no answer within `within` seconds."""
        try:
            status, body = http1_get(self.addr, "/debug/runtime", timeout=within)
            return json.loads(body) if status == 200 else None
        except OSError:
            return None

    def stop(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.stderr_file:
            self.stderr_file.seek(0)
            return self.stderr_file.read().decode(errors="replace")
        return self.proc.stderr.read().decode(errors="replace")


def http1_get(addr, path, headers="", timeout=5.0):
    """One HTTP/1.1 GET on a new connection: (status, body)."""
    with socket.create_connection(addr, timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n{headers}\r\n".encode())
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode(errors="replace")


def open_fds_limit(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def h2_client(addr, settings=None):
    """A connected socket and an h2 client connection that has sent its preface and settings."""
    s = socket.create_connection(addr)
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    if settings:
        conn.update_settings(settings)
    s.sendall(conn.data_to_send())
    return s, conn


def is_closed(s, wait):
    """True if the server closed `s` (end of stream or reset) within `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            if not s.recv(65536):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True


def report(name, figures, problems):
    verdict = "ok" if not problems else "FAILED: " + "; ".join(problems)
    print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()) + f" -> {verdict}")
    return problems if ASSERT else []


def preface_flood(binary, limited):
    """Connections that send the 24-byte HTTP/2 preface and nothing else, more than the
    service's file limit allows; then a new client asks for a page."""
    nofile, count, idle_ms = (256, 300, 2000) if SHORT else (1024, 1100, 5000)
    open_fds_limit(count + 100)
    args = ["--idle-timeout", str(idle_ms)] if limited else []
    svc = Service(binary, args, nofile=nofile)
    flood = []
    for _ in range(count):
        try:
            s = socket.create_connection(svc.addr, timeout=2)
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            flood.append(s)
        except OSError:
            break
    time.sleep(0.5)
    start = time.monotonic()
    try:
        status, _ = http1_get(svc.addr, "/", timeout=5)
    except OSError:
        status = "none"
    answered_s = round(time.monotonic() - start, 2)
    time.sleep(idle_ms / 1000 + 2.5)
    closed = sum(1 for s in flood if is_closed(s, 0.01))
    runtime = svc.runtime() or {}
    figures = {
        "flood": len(flood),
        "fd_limit": nofile,
        "new_client": status,
        "new_client_s": answered_s if status != "none" else ">5",
        "flood_closed_after_idle": closed,
        "peak_rss_mb": svc.peak_rss_mb(),
        "tasks_after": runtime.get("alive_tasks"),
        "fds_after": svc.fds(),
    }
    for s in flood:
        s.close()
    stderr = svc.stop()
    figures["stderr_lines"] = stderr.count("\n")
    problems = []
    if status != 200 or answered_s > 3:
        problems.append("a new client was not served within 3 s")
    if closed < len(flood) * 0.95:
        problems.append(f"only {closed} of {len(flood)} preface-only connections closed")
    if figures["tasks_after"] is None or figures["tasks_after"] > 20:
        problems.append("tasks left after the idle timeout")
    if figures["stderr_lines"] > 20:
        problems.append("stderr flooded")
    return report("preface_flood", figures, problems)


def zero_window(binary, limited):
    """Connections that open streams with a flow-control window of zero: no answer can be
    written to them."""
    conns, streams, send_ms = (10, 100, 1000) if SHORT else (100, 200, 2000)
    open_fds_limit(conns + 100)
    args = ["--send-timeout", str(send_ms)] if limited else []
    svc = Service(binary, args)
    clients = []
    for _ in range(conns):
        s, conn = h2_client(svc.addr, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        for i in range(streams):
            conn.send_headers(
                1 + 2 * i,
                [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x")],
                end_stream=True,
            )
        s.sendall(conn.data_to_send())
        clients.append((s, conn))
    time.sleep(0.5)
    during = svc.runtime() or {}
    time.sleep(send_ms / 1000 + 2.5)
    resets = answered = 0
    for s, conn in clients:
        s.setblocking(False)
        try:
            while True:
                data = s.recv(1 << 20)
                if not data:
                    break
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.StreamReset):
                        resets += 1
                    elif isinstance(event, h2.events.StreamEnded):
                        answered += 1
        except (BlockingIOError, OSError):
            pass
    runtime = svc.runtime() or {}
    figures = {
        "streams": conns * streams,
        "tasks_during": during.get("alive_tasks"),
        "reset": resets,
        "answered": answered,
        "peak_rss_mb": svc.peak_rss_mb(),
        "tasks_after": runtime.get("alive_tasks"),
        "fds_after": svc.fds(),
    }
    for s, _ in clients:
        s.close()
    svc.stop()
    problems = []
    if resets < conns * streams * 0.95:
        problems.append(f"only {resets} of {conns * streams} stuck streams were reset")
    if figures["tasks_after"] is None or figures["tasks_after"] > conns + 20:
        problems.append("stream tasks left after the send timeout")
    return report("zero_window", figures, problems)


def burst(svc, conns, streams, extra=(), wait=3.0):
    """`conns` HTTP/2 connections, each sending `streams` GETs of / at once (with the `extra`
    headers); reads answers for up to `wait` seconds or until every one came. Returns the
    statuses counted and the connections, still open."""
    clients = []
    for _ in range(conns):
        s, conn = h2_client(svc.addr)
        for i in range(streams):
            conn.send_headers(
                1 + 2 * i,
                [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x"),
                 *extra],
                end_stream=True,
            )
        s.sendall(conn.data_to_send())
        clients.append((s, conn))
    statuses = {}
    deadline = time.monotonic() + wait
    for s, _ in clients:
        s.setblocking(False)
    open_clients = list(clients)
    while open_clients and time.monotonic() < deadline and sum(statuses.values()) < conns * streams:
        for s, conn in list(open_clients):
            try:
                data = s.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                open_clients.remove((s, conn))
                continue
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers).get(b":status", b"?").decode()
                    statuses[status] = statuses.get(status, 0) + 1
            out = conn.data_to_send()
            if out:
                s.setblocking(True)
                s.sendall(out)
                s.setblocking(False)
        time.sleep(0.005)
    return statuses, clients


def queue_flood(binary, limited, default_queue=False):
    """Budget-less requests, far more than the service's slots, multiplexed on a few HTTP/2
    connections; with `default_queue`, more than the default queue (1,024) and no --max-queue."""
    if default_queue:
        conns, streams, max_queue = (15, 100, 1024) if SHORT else (40, 100, 1024)
    else:
        # At most 100 streams a connection: the default concurrent-stream cap refuses more.
        conns, streams, max_queue = (10, 100, 50) if SHORT else (200, 100, 200)
    open_fds_limit(conns + 100)
    args = ["--slots", "2", "--work", "200"]
    if limited and not default_queue:
        args += ["--max-queue", str(max_queue)]
    svc = Service(binary, args)
    statuses, clients = burst(svc, conns, streams, wait=3)
    runtime = svc.runtime() or {}
    figures = {
        "requests": conns * streams,
        "answered_in_3s": statuses,
        "peak_rss_mb": svc.peak_rss_mb(),
        "tasks_3s_in": runtime.get("alive_tasks"),
        "in_flight_3s_in": runtime.get("in_flight"),
    }
    for s, _ in clients:
        s.close()
    start = time.monotonic()
    svc.stop()
    figures["shutdown_s"] = round(time.monotonic() - start, 1)
    problems = []
    shed = statuses.get("503", 0)
    if shed < conns * streams - max_queue - 2 - 40:
        problems.append(f"only {shed} refused with 503 while the queue holds {max_queue}")
    if figures["in_flight_3s_in"] is None or figures["in_flight_3s_in"] > max_queue + 2:
        problems.append("more in flight than the slots and the queue")
    return report("queue_default" if default_queue else "queue_flood", figures, problems)


def queue_default(binary, limited):
    """queue_flood with the default queue: more requests than its 1,024 places, no flag."""
    return queue_flood(binary, limited, default_queue=True)


def refusal_log(binary, limited):
    """Requests whose 1 ms budget is spent at arrival (refused with 504, no work), logged with
    --log: the log must grow by a bounded amount, not a line per request, and still count every
    request. The same flood against the same binary with `--log-refused all` (a line per request,
    as the log was before folding) gives the baseline beside it."""
    conns, streams = (20, 100) if SHORT else (100, 100)
    open_fds_limit(conns + 100)

    def flood(extra):
        with tempfile.TemporaryDirectory() as tmp:
            log = os.path.join(tmp, "holds.jsonl")
            svc = Service(binary, ["--log", log, *extra])
            start = time.monotonic()
            statuses, clients = burst(svc, conns, streams, [("deadline-budget-ms", "1")], wait=20)
            seconds = time.monotonic() - start
            for s, _ in clients:
                s.close()
            svc.stop()
            with open(log) as f:
                lines = [json.loads(line) for line in f if line.strip()]
            return statuses, seconds, lines, os.path.getsize(log)

    _, _, every_lines, every_size = flood(["--log-refused", "all"])
    statuses, seconds, lines, size = flood([])
    requests = conns * streams
    counted = sum(line.get("count", 1) for line in lines)
    figures = {
        "requests": requests,
        "answered": statuses,
        "seconds": round(seconds, 1),
        "log_lines": len(lines),
        "log_bytes": size,
        "requests_counted_in_log": counted,
        "every_line_log_lines": len(every_lines),
        "every_line_log_bytes": every_size,
    }
    problems = []
    refused = statuses.get("504", 0)
    if refused != requests:
        problems.append(f"{refused} of {requests} refused with 504")
    # 100 lines in full a second and one folded line a second: a couple of hundred bytes each.
    allowed = int((seconds + 2) * 101 * 400)
    if size > allowed:
        problems.append(f"the log grew {size} bytes for {requests} refusals (allowed {allowed})")
    if counted != requests:
        problems.append(f"the log counts {counted} requests of {requests}")
    return report("refusal_log", figures, problems)


GET = [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x")]


def tls_context(alpn):
    """A client TLS context that trusts any certificate (the service's is a test one)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(alpn)
    return ctx


def test_certs():
    """A self-signed certificate and key for 127.0.0.1, in a temporary directory."""
    d = tempfile.mkdtemp(prefix="attack-tls-")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"],
        check=True, capture_output=True,
    )
    return f"{d}/cert.pem", f"{d}/key.pem"


class StuckFlood:
    """`count` HTTP/2 connections with an initial window of zero, each always holding a stream
    whose answer cannot be written: every `rearm` seconds it opens a new stream and resets the
    one before (so no stream lives long enough for a per-stream send timeout), and it
    reconnects whenever the server closes it. Runs on two threads until `stop()`."""

    def __init__(self, addr, count, rearm, tls):
        self.addr, self.count, self.rearm = addr, count, rearm
        self.ctx = tls_context(["h2"]) if tls else None
        self.lock = threading.Lock()
        self.fresh = []  # connected by the dialer, not yet armed
        self.alive = 0
        self.dialled = 0
        self.closed_by_server = 0
        self.running = True
        self.threads = [threading.Thread(target=self.dial, daemon=True),
                        threading.Thread(target=self.arm, daemon=True)]
        for t in self.threads:
            t.start()

    def connect(self):
        s = socket.create_connection(self.addr, timeout=0.5)
        if self.ctx:
            s = self.ctx.wrap_socket(s, server_hostname="localhost")
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        s.settimeout(1.0)
        return s, conn

    def dial(self):
        while self.running:
            with self.lock:
                missing = self.count - self.alive - len(self.fresh)
            if missing <= 0:
                time.sleep(0.02)
                continue
            try:
                c = self.connect()
            except (OSError, ssl.SSLError):
                time.sleep(0.01)
                continue
            with self.lock:
                self.fresh.append(c)
                self.dialled += 1

    def arm(self):
        conns = {}  # socket -> [conn, open stream id or None]
        sel = selectors.DefaultSelector()
        next_rearm = time.monotonic()
        while self.running:
            with self.lock:
                fresh, self.fresh = self.fresh, []
            for s, conn in fresh:
                conns[s] = [conn, None]
                sel.register(s, selectors.EVENT_READ)
            now = time.monotonic()
            if now >= next_rearm:
                next_rearm = now + self.rearm
                for s, state in list(conns.items()):
                    self.rearm_one(s, state, conns, sel)
            for key, _ in sel.select(timeout=0.01):
                s = key.fileobj
                if s in conns:
                    self.read(s, conns, sel)
            with self.lock:
                self.alive = len(conns)
        for s in conns:
            s.close()

    def rearm_one(self, s, state, conns, sel):
        conn, old = state
        try:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, GET, end_stream=True)
            if old is not None:
                try:
                    conn.reset_stream(old)
                except h2.exceptions.H2Error:
                    pass
            state[1] = sid
            s.sendall(conn.data_to_send())
        except (OSError, ssl.SSLError, h2.exceptions.H2Error):
            self.drop(s, conns, sel)

    def read(self, s, conns, sel):
        conn = conns[s][0]
        try:
            data = s.recv(65536)
            while isinstance(s, ssl.SSLSocket) and s.pending():
                data += s.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except (OSError, ssl.SSLError):
            data = b""
        if not data:
            self.closed_by_server += 1
            self.drop(s, conns, sel)
            return
        try:
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ConnectionTerminated):
                    self.closed_by_server += 1
                    self.drop(s, conns, sel)
                    return
            out = conn.data_to_send()
            if out:
                s.sendall(out)
        except (OSError, ssl.SSLError, h2.exceptions.H2Error):
            self.drop(s, conns, sel)

    def drop(self, s, conns, sel):
        conns.pop(s, None)
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()

    def stop(self):
        self.running = False
        for t in self.threads:
            t.join()


def probe(addr, tls, timeout):
    """A new client's GET / on a new connection (HTTP/1.1, over TLS when `tls`): the status
    and how long it took, or (None, timeout) when no answer came in time."""
    start = time.monotonic()
    try:
        s = socket.create_connection(addr, timeout=timeout)
        if tls:
            s = tls_context(["http/1.1"]).wrap_socket(s, server_hostname="localhost")
        s.settimeout(max(0.01, timeout - (time.monotonic() - start)))
        s.sendall(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        raw = b""
        while b"\r\n" not in raw:
            chunk = s.recv(4096)
            if not chunk:
                break
            raw += chunk
        s.close()
        return int(raw.split()[1]), time.monotonic() - start
    except (OSError, ssl.SSLError, ValueError, IndexError):
        return None, time.monotonic() - start


def stuck_lockout(binary, limited, tls=False):
    """More HTTP/2 connections than the service's file limit, each holding a stream whose answer
    cannot be written (window zero), re-armed every 0.5 s; a new client every 0.25 s must be
    served within 1 s, with the default flags."""
    nofile, count, watch = 512, 600, (6 if SHORT else 20)
    open_fds_limit(count + 200)
    args = []
    if tls:
        cert, key = test_certs()
        args = ["--tls-cert", cert, "--tls-key", key]
    svc = Service(binary, args, nofile=nofile, stderr_file=tempfile.TemporaryFile())
    flood = StuckFlood(svc.addr, count, 0.5, tls)
    # Until the flood holds every descriptor the service has (or 10 s).
    settle = time.monotonic() + 10
    while time.monotonic() < settle and flood.dialled < nofile - 20:
        time.sleep(0.1)
    time.sleep(1.0)
    probes = []
    end = time.monotonic() + watch
    while time.monotonic() < end:
        probes.append(probe(svc.addr, tls, 1.0))
        time.sleep(0.25)
    held = flood.alive
    flood.stop()
    peak = svc.peak_rss_mb()
    stderr = svc.stop()
    served = [t for status, t in probes if status is not None and t <= 1.0]
    figures = {
        "tls": tls,
        "flood": count,
        "fd_limit": nofile,
        "flood_dialled": flood.dialled,
        "flood_held_at_end": held,
        "flood_closed_by_server": flood.closed_by_server,
        "new_clients_served_within_1s": f"{len(served)}/{len(probes)}",
        "slowest_s": round(max((t for _, t in probes), default=0), 2),
        "peak_rss_mb": peak,
        "stderr_lines": stderr.count("\n"),
    }
    problems = []
    if len(served) < len(probes):
        problems.append(f"only {len(served)} of {len(probes)} new clients served within 1 s")
    if figures["stderr_lines"] > 2 * watch + 20:
        problems.append("stderr flooded")
    return report("stuck_lockout_tls" if tls else "stuck_lockout", figures, problems)


def stuck_lockout_tls(binary, limited):
    """stuck_lockout over TLS (ALPN h2)."""
    return stuck_lockout(binary, limited, tls=True)


def stuck_streams_memory(binary, limited):
    """Many HTTP/2 connections, each opening as many streams as it can with a window of zero
    (no answer can be written), with the default flags: the service's peak RSS must stay under
    150 MB (the default caps on connections and on streams per connection bound it)."""
    conns, streams, limit_mb = 400, 200, 150
    open_fds_limit(conns + 100)
    svc = Service(binary, [])
    rss_before = svc.status("VmRSS") / 1024
    clients = []
    for _ in range(conns):
        try:
            s, conn = h2_client(svc.addr, {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0})
        except OSError:
            break
        for i in range(streams):
            try:
                conn.send_headers(1 + 2 * i, GET, end_stream=True)
            except h2.exceptions.H2Error:
                break
        s.sendall(conn.data_to_send())
        clients.append((s, conn))
    time.sleep(3)
    during = svc.runtime() or {}
    figures = {
        "connections": len(clients),
        "streams_sent": len(clients) * streams,
        "tasks_during": during.get("alive_tasks"),
        "rss_before_mb": round(rss_before, 1),
        "peak_rss_mb": svc.peak_rss_mb(),
    }
    for s, _ in clients:
        s.close()
    svc.stop()
    problems = []
    if figures["peak_rss_mb"] > limit_mb:
        problems.append(f"peak RSS {figures['peak_rss_mb']} MB, over {limit_mb:.0f} MB")
    return report("stuck_streams_memory", figures, problems)


def rapid_reset(binary, limited):
    """HTTP/2 connections that open streams and reset them at once (the rapid-reset attack),
    one connection after another for 10 s (3 s short): hyper and h2 close each such
    connection, and the service's log must stay short (at most 20 lines in 10 s)."""
    watch = 3 if SHORT else 10
    svc = Service(binary, [], stderr_file=tempfile.TemporaryFile())
    connections = 0
    end = time.monotonic() + watch
    while time.monotonic() < end:
        try:
            s, conn = h2_client(svc.addr)
            s.settimeout(1.0)
            for i in range(100):
                sid = 1 + 2 * i
                conn.send_headers(sid, GET, end_stream=True)
                conn.reset_stream(sid)
            s.sendall(conn.data_to_send())
            is_closed(s, 0.2)
            s.close()
            connections += 1
        except (OSError, h2.exceptions.H2Error):
            pass
    peak = svc.peak_rss_mb()
    stderr = svc.stop()
    lines = stderr.count("\n")
    figures = {
        "seconds": watch,
        "connections": connections,
        "stderr_lines": lines,
        "stderr_bytes": len(stderr.encode()),
        "peak_rss_mb": peak,
    }
    problems = []
    if lines > 20:
        problems.append(f"{lines} lines of log in {watch} s")
    return report("rapid_reset", figures, problems)


def admin_flood(binary, limited):
    """More connections to the admin address (--admin-listen) than the service's file limit,
    each holding a request head open; then 40 new clients of the public port: each must be
    served (the admin address has a connection budget of its own)."""
    nofile, count = 256, 400
    open_fds_limit(count + 200)
    svc = Service(binary, ["--admin-listen", "127.0.0.1:0"], nofile=nofile,
                  stderr_file=tempfile.TemporaryFile())
    line = svc.proc.stdout.readline().decode()
    host, port = line.strip().split("://")[1].split(":")
    admin = (host, int(port))
    flood = []
    for _ in range(count):
        try:
            s = socket.create_connection(admin, timeout=0.5)
            s.sendall(b"GET /metrics HTTP/1.1\r\nx-slow: ")
            flood.append(s)
        except OSError:
            pass
    time.sleep(1)
    served = sum(1 for _ in range(40) if probe(svc.addr, False, 2.0)[0] == 200)
    peak = svc.peak_rss_mb()
    for s in flood:
        s.close()
    svc.stop()
    figures = {
        "admin_flood": len(flood),
        "fd_limit": nofile,
        "public_clients_served": f"{served}/40",
        "peak_rss_mb": peak,
    }
    problems = []
    if served < 40:
        problems.append(f"only {served} of 40 public clients served")
    return report("admin_flood", figures, problems)


ATTACKS = {
    "preface_flood": preface_flood,
    "zero_window": zero_window,
    "queue_flood": queue_flood,
    "queue_default": queue_default,
    "refusal_log": refusal_log,
    "stuck_lockout": stuck_lockout,
    "stuck_lockout_tls": stuck_lockout_tls,
    "stuck_streams_memory": stuck_streams_memory,
    "rapid_reset": rapid_reset,
    "admin_flood": admin_flood,
}


def main():
    binary = sys.argv[1]
    names = [a for a in sys.argv[2:] if not a.startswith("--")] or list(ATTACKS)
    limited = ASSERT
    problems = []
    for name in names:
        problems += ATTACKS[name](binary, limited)
    if problems:
        print(f"{len(problems)} problem(s)")
        sys.exit(1)


if __name__ == "__main__":
    main()
