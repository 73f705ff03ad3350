#!/usr/bin/env bash
# Every inbound dialect against `deadline service`, from real clients: a Connect client
# (@connectrpc/connect-node, from npm) sending connect-timeout-ms, and curl sending each header
# (Deadline-Budget-Ms, grpc-timeout, connect-timeout-ms, x-envoy-expected-rq-timeout-ms,
# X-Request-Deadline in both spellings); then every outbound dialect through a real gateway to a
# server that shows what it received, and a gateway translating one dialect into another.
# (grpc-timeout from a real gRPC client is checked by the gRPC interop script.)
#
# Services bind 127.0.0.1 port 0 and exit when this script does (their standard input closes).
# Usage: scripts/interop-dialects.sh   (DEADLINE_BIN: a built binary; default: build one)
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null
fi
for tool in curl python3; do
    if ! command -v "$tool" >/dev/null; then
        apt-get update -qq && apt-get install -y -qq "$tool" >/dev/null
    fi
done
if [ -z "${DEADLINE_BIN:-}" ]; then
    cargo build --release --bin deadline -q
    DEADLINE_BIN=target/release/deadline
fi
BIN="$(realpath "$DEADLINE_BIN")"
SCRIPTS="$(realpath scripts/interop)"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

failures=0
check() { # check DESCRIPTION CONDITION...
    local what="$1"; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}

# start NAME ARGS...: a `deadline service` whose address lands in $ADDR. Its standard input is a
# pipe this script holds open: when the script exits, the service drains and exits too.
start() {
    local name="$1"; shift
    mkfifo "$WORK/$name.in"
    "$BIN" service --name "$name" --exit-on-stdin-close "$@" <"$WORK/$name.in" >"$WORK/$name.out" &
    PIDS+=($!)
    exec {fd}>"$WORK/$name.in"
    for _ in $(seq 100); do
        if grep -q '^listening on' "$WORK/$name.out"; then break; fi
        sleep 0.05
    done
    ADDR="$(sed -n 's|^listening on http://||p' "$WORK/$name.out")"
    [ -n "$ADDR" ] || { echo "$name did not start"; exit 1; }
}

# The budget a 504 body names: "... while working: budget N ms".
budget_of() { sed -n 's/.*while working: budget \([0-9]*\) ms.*/\1/p' <<<"$1" | head -1; }
between() { [ -n "$1" ] && [ "$1" -ge "$2" ] && [ "$1" -le "$3" ]; }
# curl_get URL HEADER...: status and body, with the body on the lines after the status.
curl_get() {
    local url="$1"; shift
    local args=()
    for h in "$@"; do args+=(-H "$h"); done
    curl -s -o "$WORK/body" -w '%{http_code}' "${args[@]}" "$url"
    echo
    cat "$WORK/body"
}
ms_from_now() { echo $(( $(date +%s%3N) + $1 )); }
rfc3339_in() { # RFC 3339 with ms, $1 ms from now
    local at; at="$(ms_from_now "$1")"
    date -u -d "@$((at / 1000))" "+%Y-%m-%dT%H:%M:%S.$(printf %03d $((at % 1000)))Z"
}

echo "== inbound: curl, one header at a time, against a service that works 1.5 s"
start inventory --work 1500 --accept \
    deadline-budget-ms,grpc-timeout,connect-timeout-ms,x-envoy-expected-rq-timeout-ms,x-request-deadline
INV="http://$ADDR/items/7"
for header in "deadline-budget-ms: 400" "grpc-timeout: 400m" "grpc-timeout: 400000u" \
    "connect-timeout-ms: 400" "x-envoy-expected-rq-timeout-ms: 400" \
    "x-request-deadline: RFC3339" "x-request-deadline: MICROS"; do
    # An absolute deadline 450 ms from when it is sent (less the 50 ms assumed skew: 400).
    case "$header" in
        *RFC3339) header="x-request-deadline: $(rfc3339_in 450)" ;;
        *MICROS) header="x-request-deadline: $(ms_from_now 450)000" ;;
    esac
    reply="$(curl_get "$INV" "$header")"
    status="$(head -1 <<<"$reply")"
    budget="$(budget_of "$reply")"
    echo "     $header -> $status, budget ${budget:-?} ms"
    check "$header: 504 with its budget (300..400 ms)" between "$budget" 300 400
done
for header in "deadline-budget-ms: 1.5" "grpc-timeout: 400ms" "connect-timeout-ms: 12345678901" \
    "x-envoy-expected-rq-timeout-ms: -1" "x-request-deadline: tomorrow"; do
    reply="$(curl_get "$INV" "$header")"
    status="$(head -1 <<<"$reply")"
    check "$header: 400 naming the header" [ "$status" = 400 ]
    check "  the body names ${header%%:*}" grep -qi "invalid ${header%%:*} value" <<<"$reply"
done
reply="$(curl_get "$INV" "connect-timeout-ms: 0")"
check "connect-timeout-ms: 0 is expired (504 on arrival)" grep -q "on arrival" <<<"$reply"
reply="$(curl_get "$INV" "x-request-deadline: $(rfc3339_in -1000)")"
check "an X-Request-Deadline in the past is expired (504 on arrival)" grep -q "on arrival" <<<"$reply"
reply="$(curl_get "$INV" "deadline-budget-ms: 900" "connect-timeout-ms: 300" "grpc-timeout: 1S")"
check "the tightest of three wins (connect-timeout-ms: 300)" between "$(budget_of "$reply")" 200 300
reply="$(curl_get "$INV" "deadline-budget-ms: 500" "x-request-deadline: $(rfc3339_in -120000)")"
check "a clock two minutes off is ignored beside a relative budget" between "$(budget_of "$reply")" 400 500

echo "== inbound: @connectrpc/connect-node sends connect-timeout-ms"
(cd "$WORK" && npm init -y >/dev/null && npm install --no-audit --no-fund --silent \
    @connectrpc/connect@2 @connectrpc/connect-node@2 @bufbuild/protobuf@2 >/dev/null)
cp "$SCRIPTS/connect-client.mjs" "$WORK/"
# The reply reserve of 150 ms makes the service answer well before the client's own timer, so
# the error the client reports is the service's answer, not its own timeout.
start connect-peer --work 1500 --reserve 150 --accept deadline-budget-ms,connect-timeout-ms \
    --log "$WORK/holds.jsonl"
result="$(node "$WORK/connect-client.mjs" "http://$ADDR" 600)"
echo "     client: $result"
# A Connect client reads a bare 504 as `Unavailable` ("retry me"); the service answers a Connect
# caller with the Connect error body, so the client sees `DeadlineExceeded` and the service's
# text, before its own 600 ms.
check "the Connect client got the service's deadline answer" \
    grep -q '"code":"DeadlineExceeded"' <<<"$result"
check "  with the service's text" grep -q 'deadline exceeded at connect-peer' <<<"$result"
for _ in $(seq 40); do [ -s "$WORK/holds.jsonl" ] && break; sleep 0.05; done
hold="$(head -1 "$WORK/holds.jsonl")"
echo "     hold: $hold"
check "the service ran with the client's 600 ms budget" grep -q '"budget_ms":600' <<<"$hold"
check "  and stopped at its deadline" grep -q '"outcome":"deadline"' <<<"$hold"
worked="$(sed -n 's/.*"worked_ms":\([0-9]*\).*/\1/p' <<<"$hold")"
check "  after about 450 ms of work, not 1.5 s ($worked ms)" between "$worked" 400 600

echo "== outbound: every dialect from one budget, through a real gateway"
mkfifo "$WORK/mirror.in"
python3 "$SCRIPTS/mirror.py" <"$WORK/mirror.in" >"$WORK/mirror.out" &
PIDS+=($!)
exec {mirror_fd}>"$WORK/mirror.in"
for _ in $(seq 100); do [ -s "$WORK/mirror.out" ] && break; sleep 0.05; done
MIRROR="http://127.0.0.1:$(head -1 "$WORK/mirror.out")"
start gateway --downstream "$MIRROR" --timeout 5000 \
    --send grpc-timeout,connect-timeout-ms,x-envoy-upstream-rq-timeout-ms,x-request-deadline
reply="$(curl_get "http://$ADDR/" "deadline-budget-ms: 1000")"
echo "$reply" | sed 's/^/     /'
ours="$(sed -n 's/^deadline-budget-ms: //p' <<<"$reply")"
check "Deadline-Budget-Ms: 1000 less the 50 ms margin ($ours)" between "$ours" 900 950
check "grpc-timeout is the same budget" grep -qx "grpc-timeout: ${ours}000u" <<<"$reply"
check "connect-timeout-ms is the same budget" grep -qx "connect-timeout-ms: $ours" <<<"$reply"
check "x-envoy-upstream-rq-timeout-ms is the same budget" grep -qx "x-envoy-upstream-rq-timeout-ms: $ours" <<<"$reply"
absolute="$(sed -n 's/^x-request-deadline: //p' <<<"$reply")"
left=$(( $(date -u -d "$absolute" +%s%3N) - $(date +%s%3N) ))
check "X-Request-Deadline is now + the same budget ($left ms left when read)" between "$left" $((ours - 300)) "$ours"

echo "== a translator: Connect in, X-Request-Deadline out"
start backend --work 1500 --accept x-request-deadline
start translator --accept connect-timeout-ms --send x-request-deadline --downstream "http://$ADDR"
reply="$(curl_get "http://$ADDR/" "connect-timeout-ms: 600")"
echo "$reply" | sed 's/^/     /'
check "the backend stopped at the translated deadline" between "$(budget_of "$reply")" 400 500

if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all dialect checks passed"
