#!/usr/bin/env python3
"""Real clients reading a stream that a `deadline service` ends at the deadline.

Two services stream 20 chunks, one every 100 ms (`--stream 20:100`): ENFORCED with the enforce
layer, BASELINE with `--no-enforce` (as a service without the library). Each client asks with a
550 ms budget and reads the stream as it arrives:

  - curl over HTTP/1.1: the layer closes the connection without the final chunk, which curl
    reports as exit 18 ("transfer closed with outstanding read data remaining");
  - curl over h2c (`--http2-prior-knowledge`): the layer resets the stream with CANCEL, which
    curl reports as exit 92 ("HTTP/2 stream was not closed cleanly: CANCEL");
  - Python grpcio (`unary_stream`, raw bytes): DEADLINE_EXCEEDED after the messages sent in
    time, with the server's message naming the service. The budget goes in the metadata
    (`deadline-budget-ms: 550`) and grpcio's own timeout is 5 s, so the status seen is the
    server's, not grpcio's own deadline;
  - headless Chromium's `fetch`, reading `response.body` with a stream reader: the read fails at
    the deadline (a network error), after the chunks sent in time.

For each it checks the chunks received (3 to 5 of 20: one every 100 ms, cut at 540 ms), when the
client saw the end (before 1.5 s), and the hold the service logged for that request (matched by
`X-Request-Id`): outcome `deadline`, phase `stream`. Against BASELINE every client gets all 20
chunks, a clean end, after at least 2 s. Prints one table (the figures in docs/streams.md) and
exits 1 when a check fails.

Usage: stream-check.py CHROMIUM ENFORCED_URL BASELINE_URL ENFORCED_LOG BASELINE_LOG
(CHROMIUM may be `-` to skip the browser, which is then reported as skipped.)
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BUDGET_MS = 550
COUNT = 20


def curl(url, http2, request_id):
    args = ["curl", "-sS", "-N", "-o", "-", "-w", "\n%{time_total}", "--max-time", "10"]
    if http2:
        args.append("--http2-prior-knowledge")
    args += ["-H", f"Deadline-Budget-Ms: {BUDGET_MS}", "-H", f"X-Request-Id: {request_id}", url]
    done = subprocess.run(args, capture_output=True, text=True)
    body, _, total = done.stdout.rpartition("\n")
    chunks = sum(1 for line in body.splitlines() if "chunk" in line)
    end = "clean end" if done.returncode == 0 else f"exit {done.returncode}: {done.stderr.strip()}"
    return {"chunks": chunks, "end_ms": float(total) * 1000, "end": end, "code": done.returncode}


GRPC_CLIENT = """
import json, sys, time
import grpc

addr, budget, request_id = sys.argv[1:]
with grpc.insecure_channel(addr) as channel:
    call = channel.unary_stream("/pkg.Items/List")(
        b"",
        timeout=5.0,
        metadata=(("deadline-budget-ms", budget), ("x-request-id", request_id)),
    )
    t0 = time.monotonic()
    chunks = 0
    try:
        for _ in call:
            chunks += 1
        code, details = call.code(), call.details()
    except grpc.RpcError as err:
        code, details = err.code(), err.details()
    end_ms = (time.monotonic() - t0) * 1000
print(json.dumps({"chunks": chunks, "end_ms": end_ms, "end": f"{code.name}: {details}",
                  "code": code.name}))
"""


def grpcio(addr, request_id):
    # In a process of its own: grpcio's fork handlers would break the browser's start later
    # (it is started with a fork and a pre-exec function).
    done = subprocess.run(
        [sys.executable, "-c", GRPC_CLIENT, addr, str(BUDGET_MS), request_id],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the grpcio client failed: {done.stderr}")
    return json.loads(done.stdout)


FETCH = """
(async ([budget, id]) => {
  const t0 = performance.now();
  const headers = {'Deadline-Budget-Ms': String(budget), 'X-Request-Id': id};
  let text = '';
  try {
    const response = await fetch('/stream-' + id, {headers});
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const {done, value} = await reader.read();
      if (done) break;
      text += decoder.decode(value, {stream: true});
    }
    return {text, end: 'clean end', at: performance.now() - t0};
  } catch (e) {
    return {text, end: 'error: ' + e, at: performance.now() - t0};
  }
})(%s)
"""


def browser(chromium, base, request_id):
    from importlib import import_module

    Browser = import_module("browser-check").Browser
    b = Browser(chromium)
    try:
        # A small same-origin page: a budget header on a cross-origin fetch would need CORS.
        b.open(base + "/favicon.ico")
        got = b.evaluate(FETCH % json.dumps([BUDGET_MS, request_id]))
    finally:
        b.close()
    chunks = sum(1 for line in got["text"].splitlines() if "chunk" in line)
    return {"chunks": chunks, "end_ms": got["at"], "end": got["end"], "code": got["end"]}


def holds(path):
    """The logged holds by request id (the log is flushed at least every 100 ms)."""
    time.sleep(0.3)
    out = {}
    with open(path) as log:
        for line in log:
            hold = json.loads(line)
            out[hold.get("request_id")] = hold
    return out


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    chromium, enforced, baseline, enforced_log, baseline_log = sys.argv[1:]
    failures = []
    rows = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    clients = [
        ("curl HTTP/1.1", lambda url, rid: curl(url + "/items", False, rid), 18),
        ("curl h2c", lambda url, rid: curl(url + "/items", True, rid), 92),
        ("grpcio", lambda url, rid: grpcio(url.removeprefix("http://"), rid), "DEADLINE_EXCEEDED"),
    ]
    if chromium != "-":
        clients.append(("Chromium fetch", lambda url, rid: browser(chromium, url, rid), None))
    else:
        print("skipped: Chromium fetch (no browser given)")

    for layer, url in (("enforced", enforced), ("baseline", baseline)):
        for name, run, cut_code in clients:
            rid = f"{layer}-{name.replace(' ', '-').replace('/', '')}"
            got = run(url, rid)
            got.update(client=name, layer=layer, request_id=rid)
            rows.append(got)
            what = f"{name} ({layer})"
            if layer == "enforced":
                expect(3 <= got["chunks"] <= 5, f"{what}: {got['chunks']} chunks, not 3 to 5")
                expect(got["end_ms"] < 1500, f"{what}: ended at {got['end_ms']:.0f} ms")
                if cut_code is None:
                    expect(got["end"].startswith("error"), f"{what}: {got['end']}, not an error")
                else:
                    expect(got["code"] == cut_code, f"{what}: {got['end']}, not {cut_code}")
                if name == "grpcio":
                    expect("inventory while streaming" in got["end"], f"{what}: {got['end']}")
                if name == "curl h2c":
                    expect("CANCEL" in got["end"], f"{what}: {got['end']}")
            else:
                expect(got["chunks"] == COUNT, f"{what}: {got['chunks']} chunks, not {COUNT}")
                expect(got["end_ms"] >= 1900, f"{what}: ended at {got['end_ms']:.0f} ms")
                ok_code = "OK" if name == "grpcio" else (0 if cut_code is not None else "clean end")
                expect(got["code"] == ok_code, f"{what}: {got['end']}")

    logged = {**holds(enforced_log), **holds(baseline_log)}
    for row in rows:
        hold = logged.get(row["request_id"], {})
        row["hold"] = hold.get("outcome", "(none)")
        row["phase"] = hold.get("exceeded") or "-"
        row["streamed_ms"] = hold.get("streamed_ms")
        what = f"{row['client']} ({row['layer']})"
        if row["layer"] == "enforced":
            expect(row["hold"] == "deadline", f"{what}: hold {row['hold']}, not deadline")
            expect(row["phase"] == "stream", f"{what}: phase {row['phase']}, not stream")
        else:
            expect(row["hold"] == "ok", f"{what}: hold {row['hold']}, not ok")

    print(f"20 x 100 ms stream, budget {BUDGET_MS} ms")
    print(f"{'client':<16} {'layer':<9} {'chunks':>6} {'end seen':>9}  {'hold':<9} {'phase':<7} {'streamed':>9}  how it ended")
    for r in rows:
        streamed = "-" if r["streamed_ms"] is None else f"{r['streamed_ms']:.0f} ms"
        end = r["end"] if len(r["end"]) < 90 else r["end"][:87] + "..."
        print(
            f"{r['client']:<16} {r['layer']:<9} {r['chunks']:>6} {r['end_ms']:>6.0f} ms  "
            f"{r['hold']:<9} {r['phase']:<7} {streamed:>9}  {end}"
        )
    for failure in failures:
        print("FAIL:", failure)
    if failures:
        sys.exit(1)
    print(f"ok: {len(rows)} streams, every check passed")


if __name__ == "__main__":
    main()
