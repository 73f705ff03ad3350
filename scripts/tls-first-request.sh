#!/usr/bin/env bash
# What TLS adds to a new connection's first request, one hop: curl opens a fresh connection for
# each of N requests to one `deadline service` over plaintext and over TLS (HTTP/1.1, and HTTP/2
# chosen by ALPN), and the medians of curl's own timings are printed: connected (TCP), TLS done,
# and the whole request. The server certificate is an ECDSA P-256 one made here by openssl, signed
# by a private CA made here too (nothing is committed).
#
# Usage: scripts/tls-first-request.sh [N]   (default 50; DEADLINE_BIN: a built binary, default
# target/release/deadline, built if missing). Installs curl, openssl and python3 with apt-get if
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-50}"
BIN="${DEADLINE_BIN:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline
fi
for tool in curl openssl python3; do
    if ! command -v "$tool" >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$tool" >/dev/null
    fi
done

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=deadline bench CA" -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=localhost" \
    -keyout "$WORK/server.key" -out "$WORK/server.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$WORK/ext.cnf"
openssl x509 -req -in "$WORK/server.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" \
    -CAcreateserial -days 1 -extfile "$WORK/ext.cnf" -out "$WORK/server.pem" 2>/dev/null

# start NAME SCHEME ARGS...: starts a service, waits for its ready line, sets ADDR.
start() {
    local name="$1" scheme="$2"
    shift 2
    "$BIN" service --name "$name" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=("$!")
    for _ in $(seq 1 150); do
        if grep -q "^listening on $scheme://" "$WORK/$name.out" 2>/dev/null; then
            ADDR="$(sed -n "s|^listening on $scheme://||p" "$WORK/$name.out" | head -1)"
            return
        fi
        sleep 0.1
    done
    echo "$name did not start:" >&2
    cat "$WORK/$name.err" >&2
    exit 1
}
start plain http --work 0
PLAIN="$ADDR"
start tls https --work 0 --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key"
TLS_ADDR="$ADDR"

# measure LABEL CURL-ARGS...: N fresh connections, then the medians in ms.
measure() {
    local label="$1"
    shift
    for _ in $(seq 1 "$N"); do
        curl -sS -o /dev/null -H 'Deadline-Budget-Ms: 2000' \
            -w '%{http_code} %{time_connect} %{time_appconnect} %{time_total}\n' "$@"
    done | python3 -c '
import statistics, sys
label = sys.argv[1]
rows = [line.split() for line in sys.stdin]
bad = [r for r in rows if r[0] != "200"]
if bad:
    sys.exit(f"{label}: {len(bad)} answers were not 200: {bad[:3]}")
med = lambda i: statistics.median(float(r[i]) * 1000 for r in rows)
tls = med(2)
print(f"{label:<22} {len(rows):>4} {med(1):>10.3f} {(tls if tls > 0 else med(1)):>10.3f} {med(3):>10.3f}")
' "$label"
}
echo "medians in ms over $N fresh connections each (curl's timings; one hop, no work)"
printf '%-22s %4s %10s %10s %10s\n' "" "n" "connected" "TLS done" "answered"
measure "plaintext HTTP/1.1" --http1.1 "http://$PLAIN/items/7"
measure "TLS, HTTP/1.1" --http1.1 --cacert "$WORK/ca.pem" "https://$TLS_ADDR/items/7"
measure "TLS, HTTP/2 (ALPN)" --http2 --cacert "$WORK/ca.pem" "https://$TLS_ADDR/items/7"
