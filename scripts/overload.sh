#!/usr/bin/env bash
# Overload runs of the three-service chain: inventory (8 slots, 100 ms of work: 80 requests/s)
# offered 1x, 2x and 4x its capacity, with its queue FIFO, EDF, or EDF with predictive
# admission (all with deadlines), and the baseline without deadlines. Every request does the
# same 100 ms of work (--slow-share 0), so the capacity is exactly 80/s. Each hop calls the next
# once (--gateway-attempts 1 --orders-attempts 1): a blind retry of a 503 multiplies what
# reaches inventory, which is the retry policy's question, not the queue's. The extra mode
# `edf-admission-retries` keeps the reference three attempts a hop to show what they do;
# `edf-admission-cap` adds inventory's cap on the expected queue wait (--max-queue-wait, CAP ms,
# default 200) and `edf-admission-cap-retries` the same with three attempts a hop.
# MIX=500:0.3,2000:0.7 gives the users that budget mix (--budget-mix) in every run; the table
# then adds the in-time share of each class.
#
# Writes one JSON document per run to DIR (default: a fresh temporary directory), then the table
# and the chart (docs/overload.svg) from them. The load average is printed before each run:
# the figures depend on what else the machine is doing.
#
# Usage: scripts/overload.sh [SECONDS] [DIR]        (default 10 s per run)
#        RATES="160" MODES="edf-admission" scripts/overload.sh 5
#        MIX=500:0.3,2000:0.7 MODES="fifo edf edf-admission edf-admission-cap" scripts/overload.sh 10 DIR
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER_RUN="${1:-10}"
DIR="${2:-$(mktemp -d)}"
RATES="${RATES:-80 160 320}"
MODES="${MODES:-baseline fifo edf edf-admission edf-admission-cap}"
CAP="${CAP:-200}"
MIX="${MIX:-}"
mix=()
if [ -n "$MIX" ]; then mix=(--budget-mix "$MIX"); fi
mkdir -p "$DIR"

command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 >/dev/null; }

cargo build --release --bin deadline -q
BIN=target/release/deadline

for rate in $RATES; do
    for mode in $MODES; do
        case "$mode" in
            baseline) flags=(--only without) ;;
            fifo) flags=(--only with --queue fifo) ;;
            edf) flags=(--only with --queue edf) ;;
            edf-admission) flags=(--only with --queue edf --admission) ;;
            edf-admission-retries) flags=(--only with --queue edf --admission) ;;
            edf-admission-cap | edf-admission-cap-retries)
                flags=(--only with --queue edf --admission --max-queue-wait "$CAP") ;;
            *) echo "unknown mode $mode" >&2; exit 2 ;;
        esac
        echo "== $rate/s $mode; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
        attempts=1
        case "$mode" in *-retries) attempts=3 ;; esac
        "$BIN" load --rate "$rate" --seconds "$SECONDS_PER_RUN" --slow-share 0 \
            --gateway-attempts "$attempts" --orders-attempts "$attempts" "${flags[@]}" ${mix[@]+"${mix[@]}"} --json \
            >"$DIR/$rate-$mode.json"
    done
done
if [ -z "$MIX" ]; then
    python3 scripts/overload_chart.py "$DIR" docs/overload.svg
else
    python3 scripts/overload_chart.py "$DIR" "$DIR/overload-mix.svg"
fi
echo "JSON in $DIR" >&2
