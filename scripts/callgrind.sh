#!/usr/bin/env bash
# Instructions per request, server side, for every `deadline bench` variant, counted by
# callgrind: a figure that other work on the machine does not move, unlike requests per second.
#
# For each variant and each repeat the script runs the server twice under
# `valgrind --tool=callgrind`, each time a fresh `deadline bench --serve VARIANT` process (a
# current-thread runtime: one hop's work, or both hops' for a chain, on one thread):
#
#   short run: WARMUP requests, then standard input closes and the server drains and exits;
#   long run:  WARMUP + REQUESTS requests, the same way.
#
# Both runs pay the same start-up, connection set-up, warm-up and shutdown, so
# (long - short) / REQUESTS is what one steady-state request costs the server process: every
# instruction of every thread (hyper, tokio, the layers, the handler, the chain's client), user
# space only (callgrind does not see the kernel). The requests come from a fixed client,
# `deadline bench --target ADDR --requests N`, run natively: one keep-alive connection, one
# request at a time, the same bytes every time (each carries `Deadline-Budget-Ms: 1950`, or no
# budget header with `NO_BUDGET=1`), so every run hands the server the same input. Subtracting
# two runs was chosen over `--toggle-collect` or `callgrind_control`: it needs no function names
# (which change with inlining) and no signal to a process blocked in `epoll_wait`.
#
# Every repeat is a separate pair of runs, so the spread between repeats says how repeatable the
# count is (it should stay well under 1 %). With more than one repeat, a last column gives
# (least long run - least short run) / REQUESTS, the two least runs taken from any repeats.
#
# Why: a variant that arms a timer on every request (the peer stack's whole-request timeout)
# wakes the runtime's driver each time it does (the new timer is due before the one the driver
# last slept until, so tokio writes to its eventfd), and the server then turns its event loop
# once more, about 1,190 instructions, whenever the next request has not yet arrived when it
# next looks for work. Whether it has depends on how the fixed client and the server under
# valgrind share the CPUs. So each run's total can only grow with such turns, by up to 1,190 a
# request it served, but a repeat's per-request figure, the difference of two runs, moves both
# ways: extra turns in its short run pull it down. The least long run less the least short run
# is the count without extra turns as soon as each length has one run without them, and it
# moves much less than any one repeat. (The extra syscall the wake-up costs is not counted at
# all: callgrind sees user space only.) A variant that arms no timer for a request whose work
# is ready at once, as the enforce layers do, turns once a request in every run.
#
# Everything listens on 127.0.0.1 only; every server this script starts is stopped when it
# exits, however it exits. Installs valgrind (a Debian package) when it is missing.
#
# Usage: scripts/callgrind.sh [REQUESTS] [WARMUP] [REPEATS]      (defaults: 2000 200 2)
#        VARIANTS="bare enforce" scripts/callgrind.sh            (default: all six)
#        NO_BUDGET=1 scripts/callgrind.sh                         (requests without a budget header)
#        BENCH_SERVE_ARGS="--otlp http://127.0.0.1:PORT" scripts/callgrind.sh
#                                           (more arguments for every `bench --serve`, unquoted)
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${1:-2000}"
WARMUP="${2:-200}"
REPEATS="${3:-2}"
VARIANTS="${VARIANTS:-bare enforce peer chain-bare chain-deadline chain-peer}"

if ! command -v valgrind >/dev/null 2>&1; then
    echo "== installing valgrind" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq valgrind >/dev/null
fi

echo "== building the deadline binary (release)" >&2
cargo build --release --bin deadline -q
BIN="${CARGO_TARGET_DIR:-target}/release/deadline"

WORK="$(mktemp -d)"
SERVER_PID=""
SERVER_FD=""
cleanup() {
    if [ -n "$SERVER_FD" ]; then eval "exec $SERVER_FD>&-"; fi
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Prints the instructions (callgrind's Ir total) one `--serve VARIANT` process executed while
# it served COUNT requests from the fixed client.
instructions() {
    local variant="$1" count="$2"
    local run="$WORK/$variant-$count-$RANDOM"
    mkfifo "$run.in"
    valgrind --tool=callgrind --callgrind-out-file="$run.cg" \
        "$BIN" bench --serve "$variant" --listen 127.0.0.1:0 ${BENCH_SERVE_ARGS:-} \
        <"$run.in" >"$run.out" 2>"$run.err" &
    SERVER_PID=$!
    # The server's stdin stays open while this script holds the fifo's write end.
    exec {SERVER_FD}>"$run.in"
    local addr=""
    for _ in $(seq 1 600); do
        addr="$(sed -n 's|^listening on http://||p' "$run.out" 2>/dev/null | head -n 1)"
        if [ -n "$addr" ]; then break; fi
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then break; fi
        sleep 0.1
    done
    if [ -z "$addr" ]; then
        echo "callgrind.sh: $variant did not start:" >&2
        cat "$run.err" >&2
        kill "$SERVER_PID" 2>/dev/null || true
        return 1
    fi
    # This function runs inside `$(...)`, where `set -e` does not hold: every failure returns
    # at once, so a failed run never yields a figure.
    if ! "$BIN" bench --target "$addr" --requests "$count" ${NO_BUDGET:+--no-budget}; then
        echo "callgrind.sh: the client failed against $variant" >&2
        kill "$SERVER_PID" 2>/dev/null || true
        return 1
    fi
    # Closing stdin is the server's signal to drain and exit; callgrind then writes its file.
    eval "exec $SERVER_FD>&-"
    SERVER_FD=""
    if ! wait "$SERVER_PID"; then
        echo "callgrind.sh: the $variant server did not exit cleanly:" >&2
        cat "$run.err" >&2
        return 1
    fi
    SERVER_PID=""
    local total
    total="$(awk '/^(totals|summary):/ { print $2; exit }' "$run.cg")"
    if [ -z "$total" ]; then
        echo "callgrind.sh: no total in callgrind's output for $variant" >&2
        return 1
    fi
    echo "$total"
}

# Instructions per request between a short run and a long one of REQUESTS more requests.
per_request() { awk -v s="$1" -v l="$2" -v n="$REQUESTS" 'BEGIN { printf "%.0f", (l - s) / n }'; }

loadavg() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | xargs)"
echo "$(valgrind --version); $REQUESTS requests after $WARMUP of warm-up, one connection, one at a time"
echo "load average before: $(loadavg)"
header="variant"
for r in $(seq 1 "$REPEATS"); do header="$header|short run $r Ir|long run $r Ir|run $r Ir/request"; done
header="$header|spread"
if [ "$REPEATS" -gt 1 ]; then header="$header|least Ir/request"; fi
ROWS=("$header")
for variant in $VARIANTS; do
    echo "== $variant (load average $(loadavg))" >&2
    row="$variant"
    per=()
    least_short=""
    least_long=""
    for _ in $(seq 1 "$REPEATS"); do
        short="$(instructions "$variant" "$WARMUP")"
        long="$(instructions "$variant" "$((WARMUP + REQUESTS))")"
        one="$(per_request "$short" "$long")"
        per+=("$one")
        row="$row|$short|$long|$one"
        if [ -z "$least_short" ] || [ "$short" -lt "$least_short" ]; then least_short="$short"; fi
        if [ -z "$least_long" ] || [ "$long" -lt "$least_long" ]; then least_long="$long"; fi
    done
    spread="$(printf '%s\n' "${per[@]}" | awk 'NR == 1 { lo = $1; hi = $1 } { if ($1 < lo) lo = $1; if ($1 > hi) hi = $1 } END { printf "%.2f %%", (hi - lo) * 100 / lo }')"
    row="$row|$spread"
    if [ "$REPEATS" -gt 1 ]; then
        row="$row|$(per_request "$least_short" "$least_long")"
    fi
    ROWS+=("$row")
done
echo "load average after: $(loadavg)"
# Aligned columns (awk rather than column(1), which a minimal machine may lack).
printf '%s\n' "${ROWS[@]}" | awk -F'|' '
    { for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } n[NR] = NF }
    END { for (r = 1; r <= NR; r++) { line = ""; for (i = 1; i <= n[r]; i++) line = line sprintf(i == 1 ? "%-*s" : "  %*s", w[i], cell[r, i]); print line } }'
