#!/usr/bin/env bash
# The hot-path guard run by CI: instructions per request (scripts/callgrind.sh, a short run) of
# the enforce layer against the peer stack (tower-http's timeout over tower's concurrency
# limit), with its answer headers and without them, and of the two-hop chain with deadlines
# against the same chain built from the peer stack and reqwest. Instruction counts do not move
# with other work on the machine, so a fixed bound holds on a shared CI machine where a
# throughput figure would not.
#
# Fails when
#   enforce        > peer + ENFORCE_OVER_PEER_MAX instructions   (default 5000)
#   enforce-quiet  > peer + QUIET_OVER_PEER_MAX instructions     (default 2300)
#   chain-deadline > chain-peer x CHAIN_RATIO_MAX                (default 1.03, the goal)
#
# The peer is run PEER_REPEATS times (default 3) and compared by its least long run less its
# least short run (see scripts/callgrind.sh): its whole-request timeout wakes the runtime's
# driver on every request, and how often that costs an extra turn of the event loop (about
# 1,190 instructions) depends on how the client and the server share the CPUs, so a single
# repeat read anywhere from 13,230 to 14,643 for the same build. The least runs give the peer
# without those extra turns when each length has a run without them; across checks of one
# build they have read 13,200 to 13,647 (the highest when all three repeats had some). The
# enforce variants arm no timer for a request whose work is ready at once and count the same in
# every run (within 0.01 %), and so have the chains in repeated runs of one build, so one run
# each.
#
# The chain's bound is the project's goal (the chain with deadlines costs no more than the peer
# chain, within 3 %: it measures 0.97). `enforce` carries `Deadline-Trace` and `Server-Timing` on
# every answer, as the contract asks (17,655 on an AMD EPYC: peer + 3,861 against that check's
# 13,794, + 4,455 against the lowest, 13,200); `enforce-quiet` is the same layer with both shown
# to nobody, what a service that does not use them pays (14,998: + 1,204, + 1,798). The bounds
# leave about 500 over those for the difference between machines (18,232 on an Intel Xeon
# against 18,339 on the AMD one, at an earlier build). They were 6,500, then 6,000, then 5,800
# and 3,300, then 5,500 and 3,000, then 5,000 and 2,300, as the answer headers, the hold and its
# recorder, the header read and the work's call got cheaper.
# The goal is peer + 1,500 with the headers, not met: ENFORCE_OVER_PEER_MAX=1500 checks against
# it.
#
# Usage: scripts/callgrind-check.sh [REQUESTS] [WARMUP]     (defaults: 300 100)
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS="${1:-300}"
WARMUP="${2:-100}"
ENFORCE_OVER_PEER_MAX="${ENFORCE_OVER_PEER_MAX:-5000}"
QUIET_OVER_PEER_MAX="${QUIET_OVER_PEER_MAX:-2300}"
PEER_REPEATS="${PEER_REPEATS:-3}"
CHAIN_RATIO_MAX="${CHAIN_RATIO_MAX:-1.03}"

TABLE="$(mktemp)"
PEER_TABLE="$(mktemp)"
trap 'rm -f "$TABLE" "$PEER_TABLE"' EXIT
VARIANTS="enforce enforce-quiet chain-deadline chain-peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" 1 | tee "$TABLE"
VARIANTS="peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" "$PEER_REPEATS" | tee "$PEER_TABLE"

# A table's rows: variant, then short run, long run and instructions per request for each
# repeat, the spread ("0.00 %", two fields), and with more than one repeat the least count, the
# last column: that one is read when the table has it, the first run's count otherwise.
per() {
    local value
    value="$(awk -v v="$1" '$1 == "variant" { least = /least/ } $1 == v { print (least ? $NF : $4) }' "$TABLE" "$PEER_TABLE")"
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
