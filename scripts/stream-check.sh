#!/usr/bin/env bash
# Streams end at the deadline, as real clients see them: curl over HTTP/1.1 and h2c, Python
# grpcio reading a server stream, and headless Chromium's fetch reading a streamed body, each
# against a `deadline service --stream 20:100` with a 550 ms budget, and against the same service
# with --no-enforce (which runs the stream to its end, 2 s). scripts/stream-check.py makes the
# calls, checks them and prints the table of docs/streams.md.
#
# Installs what is missing: curl, python3-venv and chromium (Debian packages), grpcio (PyPI, into
# target/interop-venv, shared with scripts/interop-grpc.sh). The services listen on 127.0.0.1
# port 0 and are stopped when the script exits, however it exits.
#
# Usage: scripts/stream-check.sh
# Environment: DEADLINE_BIN (a built binary; default: target/release/deadline, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."

BIN="${DEADLINE_BIN:-target/release/deadline}"
if [ ! -x "$BIN" ]; then
    cargo build --release --bin deadline
fi

apt_updated=
need_apt() {
    if [ -z "$apt_updated" ]; then
        apt-get update -qq
        apt_updated=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
command -v python3 >/dev/null || need_apt python3
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt python3-venv
command -v curl >/dev/null || need_apt curl
command -v chromium >/dev/null || need_apt chromium

VENV=target/interop-venv
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import grpc' 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check 'grpcio>=1.60,<2'
fi
echo "grpcio $("$VENV/bin/python" -c 'import grpc; print(grpc.__version__)'), $(curl --version | head -1 | cut -d' ' -f1-2), $(chromium --version 2>/dev/null)"

WORK="$(mktemp -d)"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

# start NAME ARGS...: starts a streaming service, waits for its ready line, sets ADDR.
start() {
    local name="$1"
    shift
    "$BIN" service --name "$name" --stream 20:100 --log "$WORK/$name.jsonl" "$@" \
        >"$WORK/$name.out" 2>"$WORK/$name.err" &
    PIDS+=("$!")
    for _ in $(seq 1 150); do
        if grep -q '^listening on http://' "$WORK/$name.out" 2>/dev/null; then
            ADDR="$(sed -n 's|^listening on http://||p' "$WORK/$name.out" | head -1)"
            return
        fi
        sleep 0.1
    done
    echo "$name did not start:" >&2
    cat "$WORK/$name.err" >&2
    exit 1
}

start inventory
ENFORCED="$ADDR"
start baseline --no-enforce
BASELINE="$ADDR"

timeout 100 "$VENV/bin/python" scripts/stream-check.py "$(command -v chromium)" \
    "http://$ENFORCED" "http://$BASELINE" "$WORK/inventory.jsonl" "$WORK/baseline.jsonl"
