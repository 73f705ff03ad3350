#!/usr/bin/env bash
# The hot-path guard run by CI: instructions per request (scripts/callgrind.sh, a short run) of
# the enforce layer against the peer stack (tower-http's timeout over tower's concurrency
# limit), with the library's defaults for a request with a budget header and for one without,
# with both answer headers on every answer (what `deadline service` writes), and of the
# two-hop chain with deadlines against the same chain built from the peer stack and reqwest.
# Instruction counts do not move with other work on the machine, so a fixed bound holds on a
# shared CI machine where a throughput figure would not.
#
# Fails when
#   enforce, with a budget     > peer + ENFORCE_OVER_PEER_MAX instructions          (default 4000)
#   enforce, without a budget  > peer without one + NO_BUDGET_OVER_PEER_MAX        (default 1400)
#   enforce-all, with a budget > peer + ALL_OVER_PEER_MAX instructions              (default 5000)
#   chain-deadline             > chain-peer x CHAIN_RATIO_MAX                      (default 1.03, the goal)
#
# `enforce` has the library's defaults: the trace on an answer to a request that
# carried a budget, no `Server-Timing`, no context for a request without a budget; `enforce-all`
# writes both headers on every answer and makes a context for every request (the defaults
# before, and `deadline service`). The goals are peer + 2,000 with a budget (the trace on) and
# peer + 300 without one; neither is met yet (16,719 against the peer's 13,351, + 3,368; 12,995
# against its 12,130, + 865, on an AMD EPYC), so the bounds hold what this build does with about
# 500 to spare over the lowest peer readings (13,200 with a budget; 12,130 without), and
# ENFORCE_OVER_PEER_MAX=2000 NO_BUDGET_OVER_PEER_MAX=300 checks against the goals. Earlier
# bounds: with both headers 6,500, 6,000, 5,800, 5,500, 5,000 (now `enforce-all`'s); without
# them (`enforce-quiet`, a budget) 3,300, 3,000, 2,300.
#
# The peer is run PEER_REPEATS times (default 3) and compared by its least long run less its
# least short run (see scripts/callgrind.sh): its whole-request timeout wakes the runtime's
# driver on every request, and how often that costs an extra turn of the event loop (about
# 1,190 instructions) depends on how the client and the server share the CPUs, so a single
# repeat read anywhere from 13,230 to 14,643 for the same build. The least runs give the peer
# without those extra turns when each length has a run without them; across checks of one
# build they have read 13,200 to 13,647 (the highest when all three repeats had some). The
# enforce variants arm no timer for a request whose work is ready at once and count the same in
# every run (within 0.05 %), and so have the chains in repeated runs of one build, so one run
# each.
#
# Usage: scripts/callgrind-check.sh [REQUESTS] [WARMUP]     (defaults: 300 100)
set -euo pipefail
unset NO_BUDGET # each run below says whether its requests carry a budget
cd "$(dirname "$0")/.."

REQUESTS="${1:-300}"
WARMUP="${2:-100}"
ENFORCE_OVER_PEER_MAX="${ENFORCE_OVER_PEER_MAX:-4000}"
NO_BUDGET_OVER_PEER_MAX="${NO_BUDGET_OVER_PEER_MAX:-1400}"
ALL_OVER_PEER_MAX="${ALL_OVER_PEER_MAX:-5000}"
PEER_REPEATS="${PEER_REPEATS:-3}"
CHAIN_RATIO_MAX="${CHAIN_RATIO_MAX:-1.03}"

TABLE="$(mktemp)"
PEER_TABLE="$(mktemp)"
NO_BUDGET_TABLE="$(mktemp)"
NO_BUDGET_PEER_TABLE="$(mktemp)"
trap 'rm -f "$TABLE" "$PEER_TABLE" "$NO_BUDGET_TABLE" "$NO_BUDGET_PEER_TABLE"' EXIT
VARIANTS="enforce enforce-all chain-deadline chain-peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" 1 | tee "$TABLE"
VARIANTS="peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" "$PEER_REPEATS" | tee "$PEER_TABLE"
echo "== requests without a budget header"
NO_BUDGET=1 VARIANTS="enforce" scripts/callgrind.sh "$REQUESTS" "$WARMUP" 1 | tee "$NO_BUDGET_TABLE"
NO_BUDGET=1 VARIANTS="peer" scripts/callgrind.sh "$REQUESTS" "$WARMUP" "$PEER_REPEATS" | tee "$NO_BUDGET_PEER_TABLE"

# A table's rows: variant, then short run, long run and instructions per request for each
# repeat, the spread ("0.00 %", two fields), and with more than one repeat the least count, the
# last column: that one is read when the table has it, the first run's count otherwise.
# `per VARIANT TABLE...` reads VARIANT's figure from the tables named.
per() {
    local variant="$1" value
    shift
    value="$(awk -v v="$variant" '$1 == "variant" { least = /least/ } $1 == v { print (least ? $NF : $4) }' "$@")"
    if [ -z "$value" ]; then
        echo "callgrind-check: no figure for $variant in the tables above" >&2
        exit 1
    fi
    echo "$value"
}

ENFORCE="$(per enforce "$TABLE")"
ALL="$(per enforce-all "$TABLE")"
PEER="$(per peer "$PEER_TABLE")"
CHAIN="$(per chain-deadline "$TABLE")"
CHAIN_PEER="$(per chain-peer "$TABLE")"
NO_BUDGET_ENFORCE="$(per enforce "$NO_BUDGET_TABLE")"
NO_BUDGET_PEER="$(per peer "$NO_BUDGET_PEER_TABLE")"

awk -v e="$ENFORCE" -v a="$ALL" -v p="$PEER" -v c="$CHAIN" -v cp="$CHAIN_PEER" \
    -v be="$NO_BUDGET_ENFORCE" -v bp="$NO_BUDGET_PEER" \
    -v emax="$ENFORCE_OVER_PEER_MAX" -v bmax="$NO_BUDGET_OVER_PEER_MAX" -v amax="$ALL_OVER_PEER_MAX" \
    -v cmax="$CHAIN_RATIO_MAX" 'BEGIN {
    failed = 0
    printf "enforce, with a budget: %d instructions per request, peer + %d (at most peer + %d; goal + 2000)\n", e, e - p, emax
    if (e - p > emax) { print "callgrind-check: FAILED: the enforce layer costs more than allowed over the peer stack for a request with a budget"; failed = 1 }
    printf "enforce, without a budget: %d instructions per request, peer + %d (at most peer + %d; goal + 300)\n", be, be - bp, bmax
    if (be - bp > bmax) { print "callgrind-check: FAILED: the enforce layer costs more than allowed over the peer stack for a request without a budget"; failed = 1 }
    printf "enforce-all, with a budget: %d instructions per request, peer + %d (at most peer + %d)\n", a, a - p, amax
    if (a - p > amax) { print "callgrind-check: FAILED: the enforce layer with both answer headers costs more than allowed over the peer stack"; failed = 1 }
    printf "chain-deadline: %d instructions per request, %.3f x chain-peer (at most %.3f)\n", c, c / cp, cmax
    if (c / cp > cmax) { print "callgrind-check: FAILED: the chain with deadlines costs more than allowed over the peer chain"; failed = 1 }
    if (!failed) print "callgrind-check: passed"
    exit failed
}'
