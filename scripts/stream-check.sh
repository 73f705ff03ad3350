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

. scripts/lib/common.sh
deadline_bin
need_tools curl chromium
VENV=target/interop-venv
python_venv "$VENV" grpc 'grpcio>=1.60,<2'
echo "grpcio $("$VENV/bin/python" -c 'import grpc; print(grpc.__version__)'), $(curl --version | head -1 | cut -d' ' -f1-2), $(chromium --version 2>/dev/null)"

work_dir

# start NAME ARGS...: a service logging its holds; sets ADDR.
start() {
    local name="$1"
    shift
    start_service "$name" http --stream 20:100 --log "$WORK/$name.jsonl" "$@"
}

start inventory
ENFORCED="$ADDR"
start baseline --no-enforce
BASELINE="$ADDR"

timeout 100 "$VENV/bin/python" scripts/stream-check.py "$(command -v chromium)" \
    "http://$ENFORCED" "http://$BASELINE" "$WORK/inventory.jsonl" "$WORK/baseline.jsonl"
