#!/usr/bin/env bash
# The hot-path guard run by CI: instructions per request (scripts/callgrind.sh, a short run) of
# the enforce layer against the peer stack (tower-http's timeout over tower's concurrency
# limit), with its answer headers and without them, and of the two-hop chain with deadlines
# against the same chain built from the peer stack and reqwest. Instruction counts do not move
# with other work on the machine, so a fixed bound holds on a shared CI machine where a
# throughput figure would not.
#
# Fails when
#   enforce        > peer + ENFORCE_OVER_PEER_MAX instructions   (default 5500)
#   enforce-quiet  > peer + QUIET_OVER_PEER_MAX instructions     (default 3000)
#   chain-deadline > chain-peer x CHAIN_RATIO_MAX                (default 1.03, the goal)
#
# The chain's bound is the project's goal (the chain with deadlines costs no more than the peer
# chain, within 3 %: it measures 0.98). The two enforce bounds are the measured figures plus a
# margin for the timer noise in the peer's own count (13,230 to 14,643 across runs of the same
# build: the peer arms a timer per request, and how much of the timer wheel each run turns
# depends on wall time under valgrind; see docs/performance.md). `enforce` carries
# `Deadline-Trace` and `Server-Timing` on every answer, as the contract asks (18,232 on an Intel
# Xeon, 18,339 on an AMD EPYC: peer + 5,109 against the lowest peer count seen); `enforce-quiet`
# is the same layer with both shown to nobody, what a service that does not use them pays
# (15,624 and 15,742: peer + 2,512). The bounds were
# 6,500, then 6,000, then 5,800 and 3,300, as the answer headers, the hold and its recorder got
# cheaper. The goal is peer + 1,500 with the headers, not met: ENFORCE_OVER_PEER_MAX=1500
# checks against it.
#
# Usage: scripts/callgrind-check.sh [REQUESTS] [WARMUP]     (defaults: 300 100)
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${1:-300}"
WARMUP="${2:-100}"
ENFORCE_OVER_PEER_MAX="${ENFORCE_OVER_PEER_MAX:-5500}"
QUIET_OVER_PEER_MAX="${QUIET_OVER_PEER_MAX:-3000}"
CHAIN_RATIO_MAX="${CHAIN_RATIO_MAX:-1.03}"

TABLE="$(mktemp)"
trap 'rm -f "$TABLE"' EXIT
VARIANTS="enforce enforce-quiet peer chain-deadline chain-peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" 1 | tee "$TABLE"

# The table's rows: variant, short run, long run, instructions per request, spread.
per() {
    local value
    value="$(awk -v v="$1" '$1 == v { print $4 }' "$TABLE")"
    if [ -z "$value" ]; then
        echo "callgrind-check: no figure for $1 in the table above" >&2
        exit 1
    fi
    echo "$value"
}

ENFORCE="$(per enforce)"
QUIET="$(per enforce-quiet)"
PEER="$(per peer)"
CHAIN="$(per chain-deadline)"
CHAIN_PEER="$(per chain-peer)"

awk -v e="$ENFORCE" -v q="$QUIET" -v p="$PEER" -v c="$CHAIN" -v cp="$CHAIN_PEER" \
    -v emax="$ENFORCE_OVER_PEER_MAX" -v qmax="$QUIET_OVER_PEER_MAX" -v cmax="$CHAIN_RATIO_MAX" 'BEGIN {
    failed = 0
    printf "enforce: %d instructions per request, peer + %d (at most peer + %d)\n", e, e - p, emax
    if (e - p > emax) { print "callgrind-check: FAILED: the enforce layer costs more than allowed over the peer stack"; failed = 1 }
    printf "enforce-quiet: %d instructions per request, peer + %d (at most peer + %d)\n", q, q - p, qmax
    if (q - p > qmax) { print "callgrind-check: FAILED: the enforce layer without its answer headers costs more than allowed over the peer stack"; failed = 1 }
    printf "chain-deadline: %d instructions per request, %.3f x chain-peer (at most %.3f)\n", c, c / cp, cmax
    if (c / cp > cmax) { print "callgrind-check: FAILED: the chain with deadlines costs more than allowed over the peer chain"; failed = 1 }
    if (!failed) print "callgrind-check: passed"
    exit failed
}'
