#!/usr/bin/env bash
# TLS interop with clients nobody on this project wrote: Python's grpcio (the gRPC project's own
# client, which refuses TLS without ALPN h2) with the chain's CA as its root certificates, and
# curl over HTTPS with HTTP/1.1 and HTTP/2 chosen by ALPN, against a chain where every hop speaks
# TLS:
#
#   client --gRPC over TLS--> orders --gRPC over TLS (--downstream https://, --ca)--> inventory
#
# The certificates are made here, by openssl, for this run only (a private CA and one server
# certificate for localhost and 127.0.0.1); nothing is committed.
#
# What must hold:
#   1. grpcio, timeout=1.0: the servers' DEADLINE_EXCEEDED naming inventory, before grpcio's own
#      deadline;
#   2. grpcio, timeout=5.0: OK, and inventory was told less than orders received (orders keeps
#      its margin back; that the budget is stamped after the handshake is the library test
#      `the_budget_is_stamped_after_the_handshake`'s to show, with a handshake held 300 ms);
#   3. curl --http1.1 and --http2 over HTTPS: the protocol asked for is the one spoken, 200, and
#      504 for a spent budget;
#   4. curl with no CA (the system's roots) is refused by curl, and plaintext HTTP sent to the TLS
#      port gets no HTTP answer, while the service goes on serving.
#
# Usage: scripts/interop-tls.sh   (DEADLINE_BIN: a built binary; default target/release/deadline,
# built if missing). Installs python3-venv, curl and openssl with apt-get if they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/lib/common.sh
deadline_bin
need_tools curl openssl
python_venv target/interop-venv grpc 'grpcio>=1.60,<2'
VENV=target/interop-venv
echo "grpcio $("$VENV/bin/python" -c 'import grpc; print(grpc.__version__)'), $(curl --version | head -1 | cut -d' ' -f1-2), $(openssl version | cut -d' ' -f1-2)"

work_dir
make_certs "$WORK"
TLS=(--tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key")

# start NAME ARGS...: a TLS service logging its holds; sets PORT.
start() {
    local name="$1"
    shift
    start_service "$name" https --log "$WORK/$name.jsonl" "${TLS[@]}" "$@"
    PORT="${ADDR##*:}"
}

start inventory --work 1500
INVENTORY="$PORT"
start orders --downstream "https://localhost:$INVENTORY" --ca "$WORK/ca.pem" \
    --downstream-name inventory --downstream-protocol grpc --timeout 5000
ORDERS="$PORT"
echo "orders on https://localhost:$ORDERS, inventory on https://localhost:$INVENTORY"

cat >"$WORK/client.py" <<'PY'
import sys, time
import grpc

target, ca = sys.argv[1], open(sys.argv[2], "rb").read()
failures = []

def call(timeout=None, rid="interop-tls"):
    credentials = grpc.ssl_channel_credentials(root_certificates=ca)
    with grpc.secure_channel(target, credentials) as channel:
        grpc.channel_ready_future(channel).result(timeout=5)
        method = channel.unary_unary("/shop.Orders/Place")
        start = time.monotonic()
        try:
            reply = method(b"\x0a\x04book", timeout=timeout, metadata=(("x-request-id", rid),))
            return grpc.StatusCode.OK, reply.decode(errors="replace"), time.monotonic() - start
        except grpc.RpcError as e:
            return e.code(), e.details(), time.monotonic() - start

def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what)
    if not ok:
        failures.append(what)

code, text, took = call(timeout=1.0, rid="tls-short")
print(f"1. grpcio over TLS, timeout=1.0: {code.name} after {took * 1000:.0f} ms: {text}")
check(code == grpc.StatusCode.DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED")
check("deadline exceeded at inventory" in text, "the servers' message, naming inventory")
check(took < 1.0, "heard before the client's own deadline")

code, text, took = call(timeout=5.0, rid="tls-budget")
print(f"2. grpcio over TLS, timeout=5.0: {code.name} after {took * 1000:.0f} ms: {text.strip()}")
check(code == grpc.StatusCode.OK, "OK")

sys.exit(1 if failures else 0)
PY

status=0
"$VENV/bin/python" "$WORK/client.py" "localhost:$ORDERS" "$WORK/ca.pem" || status=1

echo "3. curl over HTTPS, the protocol chosen by ALPN:"
curl_check() {
    local want="$1"
    shift
    local got
    got="$(curl -sS --cacert "$WORK/ca.pem" -o /dev/null -w '%{http_version} %{http_code}' "$@")"
    if [ "$got" = "$want" ]; then
        echo "  ok    HTTP/$got for $*"
    else
        echo "  FAIL  HTTP/$got (wanted $want) for $*"
        status=1
    fi
}
URL="https://localhost:$INVENTORY/items/7"
curl_check "1.1 200" --http1.1 -H 'Deadline-Budget-Ms: 3000' "$URL"
curl_check "2 200" --http2 -H 'Deadline-Budget-Ms: 3000' "$URL"
curl_check "2 504" --http2 -H 'Deadline-Budget-Ms: 0' "$URL"

echo "4. refused without harm:"
if curl -sS -o /dev/null "$URL" 2>/dev/null; then
    echo "  FAIL  curl trusted the private CA's certificate without --cacert"
    status=1
else
    echo "  ok    curl without the CA refuses the certificate"
fi
if curl -sS -m 5 -o /dev/null "http://localhost:$INVENTORY/items/7" 2>/dev/null; then
    echo "  FAIL  plaintext HTTP to the TLS port got an HTTP answer"
    status=1
else
    echo "  ok    plaintext HTTP to the TLS port gets no HTTP answer"
fi
curl_check "2 200" --http2 -H 'Deadline-Budget-Ms: 3000' "$URL"

# Stop the services so their hold logs are complete, then read the budgets of call 2.
stop_services
"$VENV/bin/python" - "$WORK/orders.jsonl" "$WORK/inventory.jsonl" <<'PY' || status=1
import json, sys
def budget(path):
    for line in open(path):
        hold = json.loads(line)
        if hold.get("request_id") == "tls-budget":
            return hold.get("budget_ms")
orders, inventory = budget(sys.argv[1]), budget(sys.argv[2])
print(f"2. budgets received for timeout=5.0: orders {orders} ms (what grpcio sent), inventory {inventory} ms")
ok = orders is not None and inventory is not None and inventory < orders and 4900 <= orders <= 5100
print(("  ok    " if ok else "  FAIL  ") + "inventory was told less than orders received")
sys.exit(0 if ok else 1)
PY

if [ "$status" -ne 0 ]; then
    echo "interop-tls: FAILED"
    exit 1
fi
echo "interop-tls: passed"
