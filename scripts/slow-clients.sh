#!/usr/bin/env bash
# Measures slow clients against `deadline service`: 1,000 connections that send a request's
# headers one byte a second, a normal request sent while they are connected, and how long the
# header-read timeout (`--header-timeout 5000` here) takes to close them all.
#
# It runs the ignored test `slow_clients_1000` (crates/deadline-cli/tests/it/hygiene.rs) in a
# release build. 1,000 client sockets plus 1,000 server sockets need more file descriptors than
# the common default of 1,024, so the limit is raised for this shell and its children first.
# Everything listens on 127.0.0.1 only; the test kills the service it starts.
#
# Usage: scripts/slow-clients.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 4096 ]; then
    ulimit -n 4096 || { echo "cannot raise the file descriptor limit to 4096" >&2; exit 1; }
fi
echo "== file descriptor limit: $(ulimit -n)" >&2
cargo test --release -p deadline-cli --test it slow_clients_1000 -- --ignored --nocapture \
    2>&1 | grep -E '^1000 slow clients|test result'
