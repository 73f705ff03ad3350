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
. scripts/lib/common.sh
deadline_bin
need_tools curl openssl python3
work_dir
make_certs "$WORK"
start_service plain http --work 0
PLAIN="$ADDR"
start_service tls https --work 0 --tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key"
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
