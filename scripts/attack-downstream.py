#!/usr/bin/env python3
"""Hostile downstreams against `deadline service`: what its caller sees, and what it costs the hop.

Each attack starts a downstream written with raw sockets (so it can send what no well-behaved
server would), a `deadline service` calling it, and one caller. It prints, per attack, the
caller's status and how long it waited, the hop's peak resident memory (VmHWM from /proc), and
asserts the thresholds the project promises (with --check). Standard library only; everything
listens on 127.0.0.1.

  oversize      a 200 whose chunked body is SIZE MB of 0xff (not UTF-8)
  slow-body     a 200 whose head comes at once, then one body byte a second, no budget
  pushback      a 503 with Retry-After: 86400, three attempts
  grpc-pushback a 503 with grpc-retry-pushback-ms: 99999999999, three attempts
  truncated     Content-Length: 100, 10 bytes, then the connection closed
  wedged-h2     an h2c downstream behind a proxy that freezes the first connection after 1 s;
                the caller sends 5 calls a second for the watched time
  tiny-chunks   a 200 whose chunked body is 1.6 MB sent as 1-byte chunks, under the default
                4 MiB --max-body: the hop's peak RSS may grow by less than 10 MB; and with
                --max-body 65536 it must fail with 502 before 1 MB of growth

Usage: attack-downstream.py DEADLINE_BIN [--size MB] [--watch S] [--check]
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

CALLER_PATIENCE = 15.0  # seconds a caller waits before giving up


def listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(128)
    return s


def read_head(conn):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def serve(sock, handler):
    def loop():
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=guard, args=(handler, conn), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def guard(handler, conn):
    try:
        handler(conn)
    except OSError:
        pass
    finally:
        conn.close()


def oversize(size_mb):
    chunk = b"\xff" * 65536
    framed = b"%x\r\n" % len(chunk) + chunk + b"\r\n"

    def handler(conn):
        while read_head(conn) is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            for _ in range(size_mb * 16):
                conn.sendall(framed)
            conn.sendall(b"0\r\n\r\n")

    return handler


def slow_body(conn):
    if read_head(conn) is None:
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n")
    for _ in range(100000):
        conn.sendall(b"x")
        time.sleep(1)


def pushback(header):
    def handler(conn):
        while read_head(conn) is not None:
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\n" + header +
                         b"\r\ncontent-length: 5\r\n\r\nlater")

    return handler


def truncated(conn):
    if read_head(conn) is None:
        return
    conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")


def tiny_chunks(size):
    # Each byte its own chunk: "1\r\nx\r\n", in writes of 64 KB of framing.
    framed = b"1\r\nx\r\n" * 10922

    def handler(conn):
        while (head := read_head(conn)) is not None:
            conn.sendall(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
            # /warm: an empty body, for the hop's first call (its threads and buffers).
            for _ in range(0 if head.startswith(b"GET /warm") else size // 10922):
                conn.sendall(framed)
            conn.sendall(b"0\r\n\r\n")

    return handler


def growth(binary, name, handler, extra, expect, max_growth_mb):
    """One call through a hop to `handler`: the caller's status and the hop's peak RSS growth
    over its peak just before the call, after a first call to /warm (an
    empty body) has grown what any first call grows (threads, buffers: about 2.5 MB)."""
    status, body_len, elapsed, before, peak = through_hop(binary, handler, extra, warm=4)
    grew = peak - before
    shown = "gave up" if status is None else str(status)
    print(f"{name:<14} caller: {shown:<8} after {elapsed:6.2f} s, body {body_len:>10} bytes, "
          f"hop peak RSS growth {grew:7.1f} MB")
    failures = []
    if status != expect:
        failures.append(f"{name}: status {shown}, expected {expect}")
    if grew > max_growth_mb:
        failures.append(f"{name}: peak RSS grew {grew:.1f} MB, expected under {max_growth_mb} MB")
    return failures


def start_service(binary, args):
    # --exit-on-stdin-close: the service goes when this script does, however it ends.
    proc = subprocess.Popen([binary, "service", "--name", "gateway", "--exit-on-stdin-close"] + args,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = proc.stdout.readline().decode()
    assert line.startswith("listening on http://"), line
    return proc, line.strip()[len("listening on http://"):]


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def call(addr, path="/", patience=CALLER_PATIENCE):
    """One GET; (status or None when the caller gave up, body bytes, seconds)."""
    host, port = addr.rsplit(":", 1)
    start = time.monotonic()
    s = socket.create_connection((host, int(port)))
    s.settimeout(patience)
    s.sendall(f"GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n".encode())
    head = b""
    body_len = 0
    try:
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            if body_len or b"\r\n\r\n" in head:
                body_len += len(chunk)
            else:
                head += chunk
                if b"\r\n\r\n" in head:
                    head, _, rest = head.partition(b"\r\n\r\n")
                    head += b"\r\n\r\n"
                    body_len = len(rest)
    except socket.timeout:
        s.close()
        return None, body_len, time.monotonic() - start
    s.close()
    elapsed = time.monotonic() - start
    status = int(head.split()[1]) if head else None
    return status, body_len, elapsed


def through_hop(binary, handler, extra, warm=0):
    """One call through a fresh hop to a downstream `handler`, after `warm` calls to /warm:
    (status, body bytes, seconds, the hop's peak RSS before the call and after it, MB)."""
    down = listen()
    serve(down, handler)
    url = "http://127.0.0.1:%d" % down.getsockname()[1]
    proc, addr = start_service(binary, ["--downstream", url] + extra)
    try:
        for _ in range(warm):
            call(addr, "/warm")
        before = peak_rss_mb(proc.pid)
        status, body_len, elapsed = call(addr)
        return status, body_len, elapsed, before, peak_rss_mb(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        down.close()


def one_shot(binary, name, handler, extra, expect, max_seconds, max_rss_mb):
    status, body_len, elapsed, _, rss = through_hop(binary, handler, extra)
    shown = "gave up" if status is None else str(status)
    print(f"{name:<14} caller: {shown:<8} after {elapsed:6.2f} s, body {body_len:>10} bytes, "
          f"hop peak RSS {rss:7.1f} MB")
    failures = []
    if status != expect:
        failures.append(f"{name}: status {shown}, expected {expect}")
    if elapsed > max_seconds:
        failures.append(f"{name}: {elapsed:.2f} s, expected under {max_seconds} s")
    if rss > max_rss_mb:
        failures.append(f"{name}: peak RSS {rss:.1f} MB, expected under {max_rss_mb} MB")
    return failures


class FreezingProxy:
    """Forwards TCP to `target`; `freeze()` stops forwarding on every connection open now, in
    both directions, without closing them (a wedged connection). Later connections flow."""

    def __init__(self, target):
        self.target = target
        self.sock = listen()
        self.frozen = set()
        self.conns = []
        self.lock = threading.Lock()
        self.accepted = 0
        threading.Thread(target=self.loop, daemon=True).start()

    def addr(self):
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            up = socket.create_connection(self.target)
            with self.lock:
                self.accepted += 1
                key = len(self.conns)
                self.conns.append(key)
            for a, b in ((conn, up), (up, conn)):
                threading.Thread(target=self.pump, args=(a, b, key), daemon=True).start()

    def pump(self, src, dst, key):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                while key in self.frozen:
                    time.sleep(0.05)
                dst.sendall(data)
        except OSError:
            pass

    def freeze(self):
        with self.lock:
            self.frozen.update(self.conns)


def wedged_h2(binary, watch, check):
    inv, inv_addr = start_service(binary, [])
    inv_host, inv_port = inv_addr.rsplit(":", 1)
    proxy = FreezingProxy((inv_host, int(inv_port)))
    gw, gw_addr = start_service(binary, ["--downstream", "http://" + proxy.addr(),
                                         "--downstream-protocol", "h2c", "--timeout", "500"])
    results = []
    lock = threading.Lock()

    def caller(at):
        status, _, elapsed = call(gw_addr, patience=5)
        with lock:
            results.append((at, status))

    try:
        start = time.monotonic()
        frozen_at = start + 1.0
        threads = []
        froze = False
        i = 0
        while time.monotonic() < start + 1.0 + watch:
            if not froze and time.monotonic() >= frozen_at:
                proxy.freeze()
                froze = True
            t = threading.Thread(target=caller, args=(time.monotonic() - start,))
            t.start()
            threads.append(t)
            i += 1
            time.sleep(0.2)
        for t in threads:
            t.join()
        rss = peak_rss_mb(gw.pid)
    finally:
        for p in (gw, inv):
            p.kill()
            p.wait()
    after = [s for at, s in results if at >= 1.0]
    late = [s for at, s in results if at >= 3.0]
    ok_after = sum(1 for s in after if s == 200)
    ok_late = sum(1 for s in late if s == 200)
    print(f"{'wedged-h2':<14} calls after the freeze: {ok_after}/{len(after)} answered 200 "
          f"({ok_late}/{len(late)} from 2 s after it), {proxy.accepted} connections dialled, "
          f"hop peak RSS {rss:7.1f} MB")
    failures = []
    if check and (not late or ok_late < 0.8 * len(late)):
        failures.append(f"wedged-h2: {ok_late}/{len(late)} answered from 2 s after the freeze, "
                        "expected at least 80 %")
    return failures


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--size", type=int, default=100, help="oversize body, MB")
    parser.add_argument("--watch", type=float, default=6.0, help="wedged-h2 seconds watched")
    parser.add_argument("--check", action="store_true", help="assert the thresholds")
    args = parser.parse_args()
    binary = args.binary
    failures = []
    failures += one_shot(binary, "oversize", oversize(args.size), [], 502, 10, 64)
    failures += one_shot(binary, "slow-body", slow_body, ["--timeout", "1000"], 502, 5, 64)
    failures += one_shot(binary, "pushback", pushback(b"retry-after: 86400"),
                         ["--timeout", "1000", "--attempts", "3"], 502, 5, 64)
    failures += one_shot(binary, "grpc-pushback",
                         pushback(b"grpc-retry-pushback-ms: 99999999999"),
                         ["--timeout", "1000", "--attempts", "3"], 502, 5, 64)
    failures += one_shot(binary, "truncated", truncated, [], 502, 5, 64)
    failures += wedged_h2(binary, args.watch, args.check)
    failures += growth(binary, "tiny-chunks", tiny_chunks(1_600_000), ["--timeout", "30000"],
                       200, 10)
    failures += growth(binary, "tiny-chunks-64k", tiny_chunks(1_600_000),
                       ["--timeout", "30000", "--max-body", "65536"], 502, 1)
    if args.check and failures:
        for f in failures:
            print("FAIL " + f, file=sys.stderr)
        sys.exit(1)
    if args.check:
        print("all downstream attacks held")


if __name__ == "__main__":
    main()
