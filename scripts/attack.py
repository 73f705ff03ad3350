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
import socket
import subprocess
import sys
import time

import h2.config
import h2.connection
import h2.events
import h2.settings

SHORT = "--short" in sys.argv
ASSERT = "--no-assert" not in sys.argv


class Service:
    """A `deadline service` process, with an optional file-descriptor limit."""

    def __init__(self, binary, args, nofile=None):
        cmd = [binary, "service", "--name", "target", "--exit-on-stdin-close", *args]
        if nofile:
            cmd = ["bash", "-c", f'ulimit -n {nofile} && exec "$@"', "bash", *cmd]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        line = self.proc.stdout.readline().decode()
        if "http://" not in line:
            raise SystemExit(f"the service did not start: {line!r} {self.proc.stderr.read()!r}")
        host, port = line.strip().split("http://")[1].split(":")
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


def queue_flood(binary, limited):
    """Budget-less requests, far more than the service's slots, multiplexed on a few HTTP/2
    connections."""
    conns, streams, max_queue = (10, 100, 50) if SHORT else (100, 200, 200)
    open_fds_limit(conns + 100)
    args = ["--slots", "2", "--work", "200"]
    if limited:
        args += ["--max-queue", str(max_queue)]
    svc = Service(binary, args)
    clients = []
    for _ in range(conns):
        s, conn = h2_client(svc.addr)
        for i in range(streams):
            conn.send_headers(
                1 + 2 * i,
                [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", "x")],
                end_stream=True,
            )
        s.sendall(conn.data_to_send())
        clients.append((s, conn))
    statuses = {}
    deadline = time.monotonic() + 3
    for s, _ in clients:
        s.setblocking(False)
    open_clients = list(clients)
    while open_clients and time.monotonic() < deadline:
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
    return report("queue_flood", figures, problems)


ATTACKS = {
    "preface_flood": preface_flood,
    "zero_window": zero_window,
    "queue_flood": queue_flood,
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
