#!/usr/bin/env bash
# Past capacity, short form for CI (about a minute): `deadline load --overload 2` finds the
# chain's capacity on this machine in the same run (short runs with deadlines, the rate doubled
# or halved, then bisected), then offers twice that capacity both ways, gateway and orders
# limiting the requests they work on at once (0.2 slots per user/s of the capacity) and refusing
# at once a predicted wait over 50 ms. `--check` fails unless, with deadlines, goodput at
# 2x is at least 90 % of goodput at the capacity, the work after users left is at most 0.1 % of
# the run without deadlines, no service ran out of file descriptors, and the generator kept its
# schedule (send lateness p99 at most 50 ms) in every row. The table is printed whatever the
# verdict, so a failure shows its figures.
#
# Usage: scripts/overload-capacity-check.sh [BIN]   (default: target/release/deadline, built if absent)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline -q
fi

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$BIN" load --overload 2 --rate 1000 --search-seconds 3 --search-steps 2 --seconds 3 \
    --hop-slots-per-rate 0.2 --hop-max-queue-wait 50 --check || status=$?
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$status" -ne 0 ]; then
    echo "FAILED: deadline load --overload 2 --check exited with $status"
fi
exit "$status"
