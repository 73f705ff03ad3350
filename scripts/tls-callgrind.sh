#!/usr/bin/env bash
# The steady-state cost of TLS per request, in instructions (callgrind), one hop: one
# `deadline service` (no work, no downstream) under valgrind, driven by curl over one keep-alive
# connection, plaintext against TLS (HTTP/1.1, and HTTP/2 chosen by ALPN: that row also holds
# HTTP/2's own cost, which has no plaintext row here because curl 7.88 fails to reuse an h2c
# prior-knowledge connection against any hyper server, this one or bare hyper). Each figure is
# (instructions of a long run - a short run) / the requests between them, so start-up, the
# handshake and shutdown cancel out; only the service's instructions are counted (curl is
# another process). The certificate is an ECDSA P-256 one made here by openssl (nothing is
# committed).
#
# Usage: scripts/tls-callgrind.sh [REQUESTS] [WARMUP]   (defaults 300 100; DEADLINE_BIN: a built
# binary, default target/release/deadline, built if missing). Installs valgrind, curl and openssl
# with apt-get if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
REQUESTS="${1:-300}"
WARMUP="${2:-100}"
. scripts/lib/common.sh
deadline_bin
need_tools valgrind curl openssl

WORK="$(mktemp -d)"
# `instructions` runs in a subshell (`$(...)`), so the service's pid is kept in a file the
# cleanup reads: a failed run never leaves a service behind.
cleanup() {
    if [ -s "$WORK/pid" ]; then
        kill "$(cat "$WORK/pid")" 2>/dev/null || true
        sleep 0.5
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
make_certs "$WORK"

# instructions MODE COUNT: the service's total instructions for COUNT requests over one
# connection (MODE: plain, tls-h1, tls-h2).
instructions() {
    local mode="$1" count="$2" run="$WORK/$1-$2-$RANDOM" scheme=http tls=() proto=(--http1.1)
    case "$mode" in
        tls-h1) scheme=https tls=(--tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key") ;;
        tls-h2) scheme=https tls=(--tls-cert "$WORK/server.pem" --tls-key "$WORK/server.key") proto=(--http2) ;;
    esac
    valgrind --tool=callgrind --callgrind-out-file="$run.cg" \
        "$BIN" service --name hop --work 0 "${tls[@]}" >"$run.out" 2>"$run.err" </dev/null &
    local pid=$!
    echo "$pid" >"$WORK/pid"
    local addr=""
    for _ in $(seq 1 600); do
        addr="$(sed -n "s|^listening on $scheme://||p" "$run.out" 2>/dev/null | head -n 1)"
        if [ -n "$addr" ]; then break; fi
        sleep 0.1
    done
    if [ -z "$addr" ]; then
        echo "tls-callgrind.sh: the service did not start:" >&2
        cat "$run.err" >&2
        return 1
    fi
    local url="$scheme://$addr/items/7"
    for _ in $(seq 1 "$count"); do
        printf 'url = "%s"\noutput = "/dev/null"\n' "$url"
    done >"$run.curl"
    local codes
    codes="$(curl -sS "${proto[@]}" --cacert "$WORK/ca.pem" -H 'Deadline-Budget-Ms: 1950' \
        -w '%{http_code} %{num_connects}\n' -K "$run.curl" | sort | uniq -c | tr -s ' ')"
    # Every answer a 200, and one connection for all of them.
    if [ "$(echo "$codes" | wc -l)" -ne 2 ] || ! echo "$codes" | grep -q " $((count - 1)) 200 0$"; then
        echo "tls-callgrind.sh: unexpected answers for $mode: $codes" >&2
        return 1
    fi
    kill -TERM "$pid"
    wait "$pid" || true
    : >"$WORK/pid"
    local total
    total="$(awk '/^(totals|summary):/ { print $2; exit }' "$run.cg")"
    if [ -z "$total" ]; then
        echo "tls-callgrind.sh: no total in callgrind's output for $mode" >&2
        return 1
    fi
    echo "$total"
}

echo "$(valgrind --version); $REQUESTS requests after $WARMUP, one connection; load average $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-28s %14s %14s %12s\n' "" "short run Ir" "long run Ir" "Ir/request"
for mode in plain tls-h1 tls-h2; do
    short="$(instructions "$mode" "$WARMUP")" || exit 1
    long="$(instructions "$mode" "$((WARMUP + REQUESTS))")" || exit 1
    per="$(awk -v s="$short" -v l="$long" -v n="$REQUESTS" 'BEGIN { printf "%.0f", (l - s) / n }')"
    case "$mode" in
        plain) label="plaintext, HTTP/1.1" ;;
        tls-h1) label="TLS, HTTP/1.1" ;;
        tls-h2) label="TLS, HTTP/2 (ALPN)" ;;
    esac
    printf '%-28s %14s %14s %12s\n' "$label" "$short" "$long" "$per"
done
