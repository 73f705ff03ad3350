#!/usr/bin/env bash
# Interop with clients nobody on this project wrote: Python's grpcio (the gRPC project's own
# client, from PyPI, in a virtual environment) and curl's HTTP/2 with prior knowledge, against a
# `deadline service` chain on loopback:
#
#   client --gRPC--> orders --gRPC--> inventory (works 1.5 s)
#
# What grpcio must see, each call with its own timeout= (grpcio sends it as grpc-timeout):
#   1. timeout=1.0: the servers' DEADLINE_EXCEEDED, with the servers' message (naming inventory),
#      before grpcio's own deadline would have fired (grpcio's own says "Deadline Exceeded");
#   2. timeout=5.0: OK, and the downstream was told less than the client sent: the hold logs
#      show the budget orders received (what grpcio sent in grpc-timeout, which grpcio rounds up
#      a little) and the smaller one inventory received;
#   3. a malformed Deadline-Budget-Ms in the metadata: INVALID_ARGUMENT, naming the header;
#   4. no timeout at all: OK after inventory's full 1.5 s (no deadline, nothing cut).
# Then curl --http2-prior-knowledge: plain HTTP/2 to the same port gets 200, and 504 for a spent
# budget.
#
# Usage: scripts/interop-grpc.sh   (DEADLINE_BIN: a built binary; default target/release/deadline,
# built if missing). Installs python3-venv and curl with apt-get if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/common.sh
deadline_bin
need_tools curl
VENV=target/interop-venv
python_venv "$VENV" grpc 'grpcio>=1.60,<2'
echo "grpcio $("$VENV/bin/python" -c 'import grpc; print(grpc.__version__)'), $(curl --version | head -1 | cut -d' ' -f1-2)"

work_dir

# start NAME ARGS...: a service logging its holds; sets ADDR.
start() {
    local name="$1"
    shift
    start_service "$name" http --log "$WORK/$name.jsonl" "$@"
}

start inventory --work 1500
INVENTORY="$ADDR"
start orders --downstream "http://$INVENTORY" --downstream-name inventory \
    --downstream-protocol grpc --timeout 5000
ORDERS="$ADDR"
echo "orders on $ORDERS, inventory on $INVENTORY"

cat >"$WORK/client.py" <<'PY'
import sys, time
import grpc

target = sys.argv[1]
failures = []

def call(timeout=None, metadata=(), rid="interop"):
    with grpc.insecure_channel(target) as channel:
        grpc.channel_ready_future(channel).result(timeout=5)
        method = channel.unary_unary("/shop.Orders/Place")
        start = time.monotonic()
        try:
            reply = method(b"\x0a\x04book", timeout=timeout,
                           metadata=(("x-request-id", rid),) + tuple(metadata))
            return grpc.StatusCode.OK, reply.decode(errors="replace"), time.monotonic() - start
        except grpc.RpcError as e:
            return e.code(), e.details(), time.monotonic() - start

def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)

code, text, took = call(timeout=1.0, rid="interop-short")
print(f"1. timeout=1.0: {code.name} after {took * 1000:.0f} ms: {text}")
check(code == grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED")
check("deadline exceeded at inventory" in text, "the servers' message, naming inventory")
check(took < 1.0, "heard before the client's own deadline")

code, text, took = call(timeout=5.0, rid="interop-budget")
print(f"2. timeout=5.0: {code.name} after {took * 1000:.0f} ms: {text.strip()}")
check(code == grpc.StatusCode.OK, "OK")

code, text, took = call(metadata=(("deadline-budget-ms", "1.5"),), rid="interop-bad")
print(f"3. deadline-budget-ms: 1.5: {code.name}: {text}")
check(code == grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT")
check("deadline-budget-ms" in text, "the message names the header")

code, text, took = call(rid="interop-none")
print(f"4. no timeout: {code.name} after {took * 1000:.0f} ms: {text.strip()}")
check(code == grpc.StatusCode.OK, "OK")
check(took >= 1.5, "ran to its end (1.5 s of work)")

sys.exit(1 if failures else 0)
PY

status=0
"$VENV/bin/python" "$WORK/client.py" "$ORDERS" || status=1

echo "curl --http2-prior-knowledge:"
curl_check() {
    local want="$1"
    shift
    local got
    got="$(curl -sS --http2-prior-knowledge -o /dev/null -w '%{http_version} %{http_code}' "$@")"
    if [ "$got" = "$want" ]; then
        echo "  ok    HTTP/$got for $*"
    else
        echo "  FAIL  HTTP/$got (wanted $want) for $*"
        status=1
    fi
}
curl_check "2 200" -H 'Deadline-Budget-Ms: 3000' "http://$INVENTORY/items/7"
curl_check "2 504" -H 'Deadline-Budget-Ms: 0' "http://$INVENTORY/items/7"
curl_check "2 400" -H 'Deadline-Budget-Ms: +5' "http://$INVENTORY/items/7"

# Stop the services so their hold logs are complete, then read the budgets of call 2.
stop_services
"$VENV/bin/python" - "$WORK/orders.jsonl" "$WORK/inventory.jsonl" <<'PY' || status=1
import json, sys
def budget(path):
    for line in open(path):
        hold = json.loads(line)
        if hold.get("request_id") == "interop-budget":
            return hold.get("budget_ms")
orders, inventory = budget(sys.argv[1]), budget(sys.argv[2])
print(f"2. budgets received for timeout=5.0: orders {orders} ms (what grpcio sent), inventory {inventory} ms")
ok = orders is not None and inventory is not None and inventory < orders and 4900 <= orders <= 5100
print(("  ok    " if ok else "  FAIL  ") + "the downstream was told less than the client sent")
sys.exit(0 if ok else 1)
PY

if [ "$status" -ne 0 ]; then
    echo "interop: FAILED"
    exit 1
fi
echo "interop: passed"
