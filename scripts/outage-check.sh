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
python3 scripts/checks/outage.py "$report"
