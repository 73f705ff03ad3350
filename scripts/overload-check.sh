#!/usr/bin/env bash
# A short overload check for CI: inventory (8 slots x 100 ms = 80/s) offered twice its capacity
# for 5 s with an earliest-deadline-first queue and predictive admission. Fails unless the run
# keeps goodput near capacity, refuses users quickly, spends (almost) no inventory work on users
# who then miss, and actually shed something. The bounds are looser than the goals in docs/evidence.md
# (95 % of capacity, refusals within 10 ms): CI machines are shared and their figures move.
#
# Usage: scripts/overload-check.sh [BIN]      (default: target/release/deadline, built if absent)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline -q
fi
command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 >/dev/null; }

OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$BIN" load --rate 160 --seconds 5 --slow-share 0 --gateway-attempts 1 --orders-attempts 1 \
    --queue edf --admission --only with --json >"$OUT"

python3 - "$OUT" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))["runs"][0]
cap = run["capacity_per_s"]
print(f"goodput {run['goodput_per_s']:.1f}/s of {cap:.0f}/s; in time {run['in_time']} of "
      f"{run['requests']}; refused {run['refused']} (p50 {run['refused_p50_ms']} ms, "
      f"p99 {run['refused_p99_ms']} ms); shed {run['shed']}; inventory work for missed users "
      f"{run['inventory_worker_ms_on_missed']:.0f} ms")
failures = []
if run["goodput_per_s"] < 0.85 * cap:
    failures.append(f"goodput {run['goodput_per_s']:.1f}/s is below 85 % of {cap:.0f}/s")
if run["shed"] == 0:
    failures.append("nothing was shed at twice the capacity")
if run["refused_p50_ms"] > 100:
    failures.append(f"refused users heard back after {run['refused_p50_ms']} ms (p50), not within 100 ms")
# Work for users who then missed: at most 2 % of the work done for those answered in time.
budget = 0.02 * run["in_time"] * 100
if run["inventory_worker_ms_on_missed"] > budget:
    failures.append(f"inventory worked {run['inventory_worker_ms_on_missed']:.0f} ms for users who "
                    f"missed (allowed {budget:.0f} ms)")
for failure in failures:
    print("FAILED:", failure)
sys.exit(1 if failures else 0)
PY
