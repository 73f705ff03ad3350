#!/usr/bin/env bash
# OpenTelemetry against a receiver nobody on this team wrote: PyPI `oteltest`'s OTLP/HTTP sink
# (the server behind its `otelsink` command) receives the spans of a three-service chain,
# gateway -> orders -> inventory, each run as `deadline service --otlp http://127.0.0.1:PORT`.
# From the spans the sink received (scripts/otel-sink.py writes them as JSON lines):
#
#   - a request sent with a `traceparent` keeps its trace id across the three hops, and the
#     gateway's server span is the caller's child;
#   - each attempt span (CLIENT) is the parent of the next hop's server span (SERVER), and the
#     attempt's `deadline.budget_ms` is the budget that hop's server span says it arrived with;
#   - every server span has `deadline.budget_ms`, `deadline.remaining_ms` (0 <= remaining <=
#     budget), `deadline.queue_ms` and `deadline.outcome` ok, and the budgets shrink hop by hop;
#   - a request without a `traceparent` gets a trace of its own, linked the same way;
#   - the services' counters say no span was dropped or failed.
#
# The sink listens on a free loopback port by default (oteltest's own `otelsink` command always
# takes 4318); OTEL_CHECK_PORT=4318 uses that one, and the check then fails at once, saying so,
# when it is busy. Everything started here is stopped when the script exits, however it exits.
#
# Usage: scripts/otel-check.sh     (DEADLINE_BIN to use a built binary; built if missing)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/common.sh
deadline_bin
need_tools curl
VENV=target/otel-venv
python_venv "$VENV" oteltest.sink 'oteltest>=0.40,<1'
echo "oteltest $("$VENV/bin/pip" show oteltest 2>/dev/null | sed -n 's/^Version: //p')"

# PIDS[0] is the sink: the services are stopped first (they export what they hold as they stop),
# the sink last.
work_dir
"$VENV/bin/python" scripts/otel-sink.py "$WORK/spans.jsonl" "$WORK/sink.port" \
    "${OTEL_CHECK_PORT:-0}" 2>"$WORK/sink.err" &
SINK_PID=$!
PIDS+=("$SINK_PID")
for _ in $(seq 1 100); do
    [ -s "$WORK/sink.port" ] && break
    if ! kill -0 "$SINK_PID" 2>/dev/null; then
        echo "FAILED: the OTLP sink did not start:" >&2
        cat "$WORK/sink.err" >&2
        exit 1
    fi
    sleep 0.1
done
[ -s "$WORK/sink.port" ] || { echo "FAILED: the OTLP sink did not start in 10 s" >&2; exit 1; }
OTLP="http://127.0.0.1:$(cat "$WORK/sink.port")"
echo "sink on $OTLP"

# start NAME ARGS...: a service exporting to the sink; sets ADDR.
start() {
    local name="$1"
    shift
    start_service "$name" http --otlp "$OTLP" "$@"
}

start inventory --work 20
INVENTORY="$ADDR"
start orders --work 10 --downstream "http://$INVENTORY" --downstream-name inventory
ORDERS="$ADDR"
start gateway --downstream "http://$ORDERS" --downstream-name orders
GATEWAY="$ADDR"

CALLER_TRACE=4bf92f3577b34da6a3ce929d0e0e4736
CALLER_SPAN=00f067aa0ba902b7
curl -sf -o /dev/null -H 'Deadline-Budget-Ms: 2000' \
    -H "traceparent: 00-$CALLER_TRACE-$CALLER_SPAN-01" "http://$GATEWAY/items/1"
curl -sf -o /dev/null -H 'Deadline-Budget-Ms: 1500' "http://$GATEWAY/items/2"

# The counters before stopping: nothing dropped, nothing failed.
DROPS="$(curl -sf "http://$GATEWAY/metrics" | grep -E '^deadline_otel_spans_(dropped|failed)_total' || true)"

# Stopping flushes each service's exporter (and prints what became of its spans); the sink
# (PIDS[0]) keeps receiving until the exit.
for pid in "${PIDS[@]:1}"; do
    kill -TERM "$pid" 2>/dev/null || true
done
for pid in "${PIDS[@]:1}"; do
    wait "$pid" 2>/dev/null || true
done
PIDS=("$SINK_PID")
grep -h 'OTLP to' "$WORK"/{gateway,orders,inventory}.err || true

status=0
"$VENV/bin/python" - "$WORK/spans.jsonl" "$CALLER_TRACE" "$CALLER_SPAN" "$DROPS" <<'PY' || status=1
import json, sys, time

path, caller_trace, caller_span, drops = sys.argv[1:5]
failures = []
def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)

# Ten spans: three server spans and two attempts per request. The services flushed on exit;
# the sink writes as it receives, so give it a moment.
spans = []
for _ in range(50):
    spans = [json.loads(line) for line in open(path)]
    if len(spans) >= 10:
        break
    time.sleep(0.1)
check(len(spans) == 10, f"10 spans received ({len(spans)})")

def chain(trace):
    mine = [s for s in spans if s["trace_id"] == trace]
    server = {s["service"]: s for s in mine if s["kind"] == "SPAN_KIND_SERVER"}
    client = {s["service"]: s for s in mine if s["kind"] == "SPAN_KIND_CLIENT"}
    return mine, server, client

def links(label, trace, budget):
    mine, server, client = chain(trace)
    check(sorted(server) == ["gateway", "inventory", "orders"],
          f"{label}: a server span from each hop in trace {trace} ({sorted(server)})")
    check(sorted(client) == ["gateway", "orders"],
          f"{label}: an attempt span from gateway and orders ({sorted(client)})")
    if failures:
        return
    for caller, callee in [("gateway", "orders"), ("orders", "inventory")]:
        attempt, hop = client[caller], server[callee]
        check(attempt["parent_span_id"] == server[caller]["span_id"],
              f"{label}: {caller}'s attempt is the child of {caller}'s server span")
        check(hop["parent_span_id"] == attempt["span_id"],
              f"{label}: {callee}'s server span is the child of {caller}'s attempt")
        check(attempt["attributes"].get("deadline.budget_ms") == hop["attributes"].get("deadline.budget_ms"),
              f"{label}: {callee} arrived with the budget {caller}'s attempt sent "
              f"({attempt['attributes'].get('deadline.budget_ms')} ms)")
        check("http.request.resend_count" not in attempt["attributes"],
              f"{label}: {caller}'s only attempt is no resend")
    budgets = []
    for name in ["gateway", "orders", "inventory"]:
        a = server[name]["attributes"]
        b, r, q = a.get("deadline.budget_ms"), a.get("deadline.remaining_ms"), a.get("deadline.queue_ms")
        check(isinstance(b, int) and isinstance(r, int) and isinstance(q, int) and 0 <= r <= b and q >= 0,
              f"{label}: {name}: budget {b} ms, remaining {r} ms, queued {q} ms")
        check(a.get("deadline.outcome") == "ok", f"{label}: {name}: outcome {a.get('deadline.outcome')}")
        budgets.append(b)
    check(budgets[0] == budget and budgets[0] > budgets[1] > budgets[2],
          f"{label}: budgets shrink along the chain {budgets}")

links("with traceparent", caller_trace, 2000)
_, server, _ = chain(caller_trace)
if "gateway" in server:
    check(server["gateway"]["parent_span_id"] == caller_span, "the gateway's server span is the caller's child")
others = {s["trace_id"] for s in spans if s["trace_id"] != caller_trace}
check(len(others) == 1, f"the request without traceparent has one trace of its own ({len(others)})")
if len(others) == 1:
    trace = others.pop()
    links("without traceparent", trace, 1500)
    _, server, _ = chain(trace)
    check(server.get("gateway", {}).get("parent_span_id") == "", "its gateway span is a root")
check(all(line.endswith(" 0") for line in drops.splitlines()) and drops.count("\n") == 1,
      f"gateway: no span dropped or failed ({drops.split()})")
print(f"{len(failures)} failed" if failures else "otel-check: passed")
sys.exit(1 if failures else 0)
PY
if [ "$status" -ne 0 ]; then
    echo "--- spans received" >&2
    cat "$WORK/spans.jsonl" >&2 || true
    for name in gateway orders inventory; do
        echo "--- $name stderr" >&2
        tail -5 "$WORK/$name.err" >&2 || true
    done
fi
exit "$status"
