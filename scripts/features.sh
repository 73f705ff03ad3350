#!/usr/bin/env bash
# The library crates built with their features off as well as on: CI's other steps build the
# workspace with every feature on (--all-features, and the CLI turns on deadline-http's
# `metrics` and `baseline`), so a build without them would otherwise never be compiled.
#
# An explicit matrix rather than `cargo hack --each-feature`: the crates have a handful of
# features between them, installing cargo-hack costs a compile of its own, and the matrix names
# each build a user can ask for. Each line is one build. (deadline-http's tests always run with
# `metrics` and `baseline` on: its dev-dependency on itself turns them on.)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

run() {
    printf '  %s\n' "$*"
    "$@"
}

echo "features: each library crate with its features off, alone, and on"
run cargo check --quiet -p deadline-core --no-default-features
run cargo check --quiet -p deadline-core --features serde
run cargo check --quiet -p deadline-http --no-default-features
run cargo check --quiet -p deadline-http --no-default-features --features axum
run cargo check --quiet -p deadline-http --no-default-features --features metrics
run cargo check --quiet -p deadline-http --no-default-features --features baseline
run cargo check --quiet -p deadline-http --no-default-features --features tls
run cargo check --quiet -p deadline-http --no-default-features --features otel
run cargo check --quiet -p deadline-reqwest
run cargo check --quiet -p deadline-reqwest --features metrics
run cargo check --quiet -p deadline-reqwest --features otel
echo "features: passed"
