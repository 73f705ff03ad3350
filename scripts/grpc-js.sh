#!/usr/bin/env bash
# The demo side by side with gRPC's own deadlines: the same slow request through a chain written
# with Node's @grpc/grpc-js (timeouts only; the documented `parent` propagation; and handlers that
# also stop on `cancelled`) and through deadline services, over gRPC on loopback.
#
#   scripts/grpc-js.sh [RUNS] [deadline demo flags...]
#
# Installs Node.js and npm from Debian's packages if missing and @grpc/grpc-js from npm into
# target/grpc-js, builds the binary unless DEADLINE_BIN names one, and runs
# `deadline demo --peer grpc-js --runs RUNS --peer-check`: it fails if a run with deadlines made
# any call or did any work after the user left, and if the grpc-js chains do not show what they
# are there for (timeouts only: the whole cascade of 12 calls and work after the user left in
# every run; with `parent` propagation: fewer calls, median of the runs), so a broken peer chain
# cannot pass as a comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-5}"
shift || true

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "installing Node.js and npm from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

prefix=target/grpc-js
if [ ! -d "$prefix/node_modules/@grpc/grpc-js" ]; then
    mkdir -p "$prefix"
    echo '{"private": true}' > "$prefix/package.json"
    npm install --prefix "$prefix" --no-audit --no-fund --silent @grpc/grpc-js@1.14.7
fi
echo "node $(node --version), @grpc/grpc-js $(node -p "require('./$prefix/node_modules/@grpc/grpc-js/package.json').version")"

bin="${DEADLINE_BIN:-}"
if [ -z "$bin" ]; then
    cargo build --release --bin deadline
    bin=target/release/deadline
fi
"$bin" demo --peer grpc-js --runs "$runs" --node-modules "$prefix/node_modules" --peer-check "$@"
