#!/usr/bin/env bash
# A short outage run, both ways: inventory answers 503 to everything for 4 s in a 10 s load.
# Fails unless, during the outage, the run with deadlines (and its default retry budget: the
# ratio cap and a bucket that failed retries empty) sent fewer inventory calls per user request
# than the run without, at most 1.15, and in-time answers came back within 2 s of the outage's
# end. About 35 s.
#
# Usage: scripts/outage-check.sh  (DEADLINE_BIN overrides the binary, default the release one)
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${DEADLINE_BIN:-target/release/deadline}"
if [ ! -x "$bin" ]; then
    cargo build --release --bin deadline
fi
if ! command -v python3 >/dev/null; then
    apt-get update && apt-get install -y python3
fi
report="$(mktemp)"
trap 'rm -f "$report"' EXIT
"$bin" load --seconds 10 --outage 3:4 --json >"$report"
python3 - "$report" <<'PY'
import json, sys
runs = {r["deadlines"]: r for r in json.load(open(sys.argv[1]))["runs"]}
without, with_ = runs[False], runs[True]
failures = []
cw, cn = with_["calls_per_request_in_outage"], without["calls_per_request_in_outage"]
print(f"calls per request in the outage: without {cn:.2f}, with {cw:.2f}")
print(f"back in time after the outage: with {with_['outage']['recovery_s']} s")
if cw is None or cn is None:
    failures.append("no user was sent during the outage")
else:
    if not cw < cn:
        failures.append(f"with deadlines {cw:.2f} calls per request, not fewer than {cn:.2f} without")
    if cw > 1.15:
        failures.append(f"with deadlines {cw:.2f} calls per request (needs <= 1.15)")
rec = with_["outage"]["recovery_s"] if with_["outage"] else None
if rec is None or rec > 2.0:
    failures.append(f"in-time answers came back after {rec} s (needs <= 2 s)")
for f in failures:
    print("  -", f)
print("outage check:", "FAILED" if failures else "passed")
sys.exit(1 if failures else 0)
PY
