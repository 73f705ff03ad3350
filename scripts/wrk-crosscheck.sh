#!/usr/bin/env bash
# Cross-checks `deadline bench` with an independent load generator, wrk.
#
# 1. `deadline service --name bench --work 0` (the real service: enforce layer, hold hook,
#    request ids), driven with and without a Deadline-Budget-Ms header;
# 2. `deadline bench --serve bare` and `--serve enforce` (the bench's own servers: the same
#    trivial handler on plain hyper and behind the enforce layer), both with the header, for
#    the enforce/bare ratio.
#
# Everything listens on 127.0.0.1 only, and every server this script starts is stopped when it
# exits, however it exits. Installs wrk (a Debian package) when it is missing.
#
# Usage: scripts/wrk-crosscheck.sh [SECONDS] [CONNECTIONS] [THREADS]   (defaults: 10 32 1)
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${1:-10}"
CONNECTIONS="${2:-32}"
THREADS="${3:-1}"
BUDGET_MS=1950

if ! command -v wrk >/dev/null 2>&1; then
    echo "== installing wrk" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq wrk >/dev/null
fi

echo "== building the deadline binary (release)" >&2
cargo build --release --bin deadline -q
BIN=target/release/deadline

WORK="$(mktemp -d)"
PIDS=()
FDS=()
cleanup() {
    # Closing a server's stdin is its signal to drain and exit; the kill is a second line.
    for fd in "${FDS[@]}"; do
        eval "exec $fd>&-"
    done
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Starts "$@" as server NAME with its stdin on a fifo held open by this script (so it lives
# while the script does), waits for its "listening on URL" line and sets URL to it.
URL=""
start() {
    local name="$1"
    shift
    local out="$WORK/$name.out"
    mkfifo "$WORK/$name.in"
    "$@" <"$WORK/$name.in" >"$out" &
    PIDS+=("$!")
    exec {fd}>"$WORK/$name.in"
    FDS+=("$fd")
    for _ in $(seq 1 100); do
        URL="$(sed -n 's/^listening on //p' "$out" 2>/dev/null | head -n 1)"
        if [ -n "$URL" ]; then
            return 0
        fi
        sleep 0.1
    done
    echo "$name did not start" >&2
    return 1
}

run_wrk() {
    local label="$1" url="$2"
    shift 2
    echo
    echo "== $label: wrk -t$THREADS -c$CONNECTIONS -d${SECONDS_PER_RUN}s --latency $* $url"
    echo "   load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"${SECONDS_PER_RUN}s" --latency "$@" "$url"
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs)"

start service "$BIN" service --name bench --work 0 --listen 127.0.0.1:0 --exit-on-stdin-close
SERVICE_URL="$URL"
start bare "$BIN" bench --serve bare --listen 127.0.0.1:0
BARE_URL="$URL"
start enforce "$BIN" bench --serve enforce --listen 127.0.0.1:0
ENFORCE_URL="$URL"

run_wrk "deadline service, no budget header" "$SERVICE_URL/bench"
run_wrk "deadline service, Deadline-Budget-Ms: $BUDGET_MS" "$SERVICE_URL/bench" -H "Deadline-Budget-Ms: $BUDGET_MS"
for round in 1 2; do
    run_wrk "bench --serve bare (round $round)" "$BARE_URL/bench" -H "Deadline-Budget-Ms: $BUDGET_MS"
    run_wrk "bench --serve enforce (round $round)" "$ENFORCE_URL/bench" -H "Deadline-Budget-Ms: $BUDGET_MS"
done
