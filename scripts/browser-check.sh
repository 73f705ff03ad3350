#!/usr/bin/env bash
# The enforce layer's Server-Timing header, read by a real browser: a headless Chromium opens a
# page on a `deadline service` and fetches two more paths from it with budgets, and
# scripts/browser-check.py reads `serverTiming` from the browser's own performance entries
# through the DevTools protocol (standard-library Python, over --remote-debugging-pipe).
#
# It checks that the browser sees `queue` and `work` on the page (no budget, so no `budget`),
# and `queue`, `work` and `budget` on each fetch, with the budget exactly as sent, the work at
# least the service's work time for a budget that covers it, and the work cut short on the 504
# of a budget that does not.
#
# Installs Debian's `chromium` when it is missing (apt-get update, then apt-get install -y). The
# service listens on 127.0.0.1 port 0 only; it and the browser (with its helper processes) are
# stopped when the script exits, however it exits.
#
# Usage: scripts/browser-check.sh
# Environment: DEADLINE_BIN (a built binary; default: build target/release/deadline),
#              WORK_MS (the service's work per request; default 300).
set -euo pipefail
cd "$(dirname "$0")/.."

WORK_MS="${WORK_MS:-300}"

if ! command -v chromium >/dev/null 2>&1; then
    echo "== installing chromium" >&2
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "browser-check: python3 is needed" >&2
    exit 1
fi

if [ -z "${DEADLINE_BIN:-}" ]; then
    cargo build --release --bin deadline -q
    DEADLINE_BIN=target/release/deadline
fi

WORK="$(mktemp -d)"
SERVICE_PID=""
cleanup() {
    if [ -n "$SERVICE_PID" ]; then
        kill "$SERVICE_PID" 2>/dev/null || true
        wait "$SERVICE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

"$DEADLINE_BIN" service --name inventory --work "$WORK_MS" >"$WORK/out" 2>"$WORK/err" &
SERVICE_PID=$!
BASE=""
for _ in $(seq 1 100); do
    BASE="$(sed -n 's/^listening on \(http:\/\/[0-9.:]*\)$/\1/p' "$WORK/out")"
    if [ -n "$BASE" ]; then break; fi
    if ! kill -0 "$SERVICE_PID" 2>/dev/null; then
        echo "browser-check: the service exited:" >&2
        cat "$WORK/err" >&2
        exit 1
    fi
    sleep 0.1
done
if [ -z "$BASE" ]; then
    echo "browser-check: no ready line from the service" >&2
    exit 1
fi

echo "service: $BASE (work $WORK_MS ms); $(chromium --version 2>/dev/null)"
echo "the header itself: $(curl -s -o /dev/null -D - -H 'Deadline-Budget-Ms: 500' "$BASE/curl" \
    | tr -d '\r' | grep -i '^server-timing:' || echo '(curl missing or no header)')"
timeout 90 python3 scripts/browser-check.py "$(command -v chromium)" "$BASE" "$WORK_MS"
