#!/usr/bin/env bash
# The attack suite: hostile clients against a `deadline service` on loopback, with real HTTP/2
# frames (Python's `h2` package, in a virtual environment this script makes). Each attack starts
# its own service, attacks it, and prints what a client saw, the service's peak RSS (VmHWM),
# and its tasks and file descriptors after; it fails (non-zero exit) when a threshold is
# crossed. The attacks (scripts/attack.py, one function each, listed in ATTACKS):
#
#   preface_flood  more preface-only HTTP/2 connections than the service's file limit
#                  (`ulimit -n`), then a new client: it must be served within 3 s, and the
#                  flood closed after --idle-timeout;
#   zero_window    streams opened with a flow-control window of zero: each must be reset after
#                  --send-timeout, its task freed;
#   queue_flood    budget-less requests far beyond --slots 2: beyond --max-queue they must be
#                  refused with 503 at once, not queued;
#   queue_default  the same with no --max-queue and more requests than the default queue
#                  (1,024): the default bounds it;
#   refusal_log    requests whose 1 ms budget is spent at arrival, with --log: the log grows by
#                  the per-second allowance and a folded line, not a line per request, and
#                  still counts every request (beside a baseline run with --log-refused all);
#   stuck_lockout  600 HTTP/2 connections under `ulimit -n 512`, each holding a zero-window
#                  stream re-armed every 0.5 s: a new client every 0.25 s served within 1 s,
#                  default flags (stuck_lockout_tls: the same over TLS);
#   stuck_streams_memory  400 connections x 200 zero-window streams, default flags: peak RSS
#                  under 150 MB;
#   rapid_reset    connections opening and resetting streams for 10 s (3 s short): at most
#                  20 lines of log;
#   admin_flood    400 connections holding request heads open on --admin-listen under
#                  `ulimit -n 256`: 40 new public clients all served.
#
# Usage: scripts/attack.sh [--short] [--no-assert] [ATTACK...]
#   --short      the CI form (smaller floods, shorter watches, about a minute in all);
#   --no-assert  figures only (for a binary without the limit flags: the "before" column of
#                docs/limits.md).
# DEADLINE_BIN: a built binary (default target/release/deadline, built if missing). Installs
# python3-venv with apt-get if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${DEADLINE_BIN:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline
fi

if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
fi
VENV=target/attack-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import h2' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'h2>=4.1,<5'
fi

exec "$VENV/bin/python" scripts/attack.py "$BIN" "$@"
