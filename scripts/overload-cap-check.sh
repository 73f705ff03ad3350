#!/usr/bin/env bash
# Short checks of admission's cap on the queue wait and of mixed budgets, for CI (about 40 s).
# Inventory (8 slots x 100 ms = 80/s) is offered twice its capacity for 5 s, each hop calling the
# next once:
#   1. EDF + admission + --max-queue-wait 200, one budget for all: fails unless the users
#      answered in time waited at most 300 ms (p50) and goodput is at least 95 % of capacity.
#   2. --budget-mix 500:0.3,2000:0.7, FIFO and then EDF + admission + the cap: fails unless with
#      the cap goodput is at least 95 % of capacity, at least 90 % of the 500 ms users are
#      answered in time (FIFO: at most half as many), and refusals come at once (p99 <= 100 ms).
#
# Usage: scripts/overload-cap-check.sh [BIN]   (default: target/release/deadline, built if absent)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${1:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline -q
fi
command -v python3 >/dev/null || { apt-get update -qq && apt-get install -y -qq python3 >/dev/null; }

DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
common=(load --rate 160 --seconds 5 --slow-share 0 --gateway-attempts 1 --orders-attempts 1 --only with --json)
"$BIN" "${common[@]}" --queue edf --admission --max-queue-wait 200 >"$DIR/cap.json"
"$BIN" "${common[@]}" --queue fifo --budget-mix 500:0.3,2000:0.7 >"$DIR/mix-fifo.json"
"$BIN" "${common[@]}" --queue edf --admission --max-queue-wait 200 \
    --budget-mix 500:0.3,2000:0.7 >"$DIR/mix-cap.json"

python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
run = lambda name: json.load(open(f"{d}/{name}.json"))["runs"][0]
cap, fifo, mix = run("cap"), run("mix-fifo"), run("mix-cap")
capacity = cap["capacity_per_s"]
failures = []
print(f"wait cap, one budget: goodput {cap['goodput_per_s']:.1f}/s of {capacity:.0f}; in-time p50 "
      f"{cap['in_time_p50_ms']} ms, p99 {cap['in_time_p99_ms']} ms; refused {cap['refused']} "
      f"(p99 {cap['refused_p99_ms']} ms)")
if cap["in_time_p50_ms"] > 300:
    failures.append(f"with the wait cap users answered in time waited {cap['in_time_p50_ms']} ms (p50), not <= 300")
if cap["goodput_per_s"] < 0.95 * capacity:
    failures.append(f"with the wait cap goodput {cap['goodput_per_s']:.1f}/s is below 95 % of {capacity:.0f}/s")
short = lambda r: next(c for c in r["budget_classes"] if c["wait_ms"] == 500)
for name, r in [("FIFO", fifo), ("EDF + admission + cap", mix)]:
    shares = ", ".join(f"{c['wait_ms']} ms {100 * c['in_time_share']:.0f} %" for c in r["budget_classes"])
    print(f"mixed budgets, {name}: goodput {r['goodput_per_s']:.1f}/s; in time {shares}; "
          f"refused p99 {r['refused_p99_ms']} ms")
if mix["goodput_per_s"] < 0.95 * capacity:
    failures.append(f"mixed budgets: goodput {mix['goodput_per_s']:.1f}/s is below 95 % of {capacity:.0f}/s")
if short(mix)["in_time_share"] < 0.9:
    failures.append(f"mixed budgets: only {100 * short(mix)['in_time_share']:.0f} % of the 500 ms users in time (needs >= 90 %)")
if short(fifo)["in_time_share"] > 0.5 * short(mix)["in_time_share"]:
    failures.append("mixed budgets: FIFO served the 500 ms users more than half as well: EDF made no difference")
if mix["refused_p99_ms"] > 100:
    failures.append(f"mixed budgets: refusals took {mix['refused_p99_ms']} ms (p99), not at once")
for f in failures:
    print("FAILED:", f)
print("overload cap check:", "FAILED" if failures else "passed")
sys.exit(1 if failures else 0)
PY
