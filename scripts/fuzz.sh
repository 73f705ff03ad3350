#!/usr/bin/env bash
# Coverage-guided fuzzing of the core's parsers and trace codec with cargo-fuzz (libFuzzer).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]    (default: 30 s, every target)
#   FUZZ_RUNS=10000000 scripts/fuzz.sh 0 trace_decode   (a number of executions instead of a time)
#
# Targets (fuzz/fuzz_targets/): budget_header, grpc_timeout, trace_decode, trace_roundtrip,
# other_dialects, nginx_config, haproxy_config. Each asserts its properties itself (a model of the documented rules, stable
# decoding, an allocation bound), so any failed property is a crash. Runs on stable Rust without a sanitizer (`-s none`),
# one target at a time. Exits non-zero if any target crashed, timed out or ran out of memory; the
# input that did it is in fuzz/artifacts/TARGET/.
#
# The committed seeds (fuzz/seeds/TARGET/, a handful of inputs from the table tests) are read as a
# second corpus directory; what the fuzzer finds grows fuzz/corpus/TARGET/, which git ignores.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-30}"
shift || true
targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
    targets=(budget_header grpc_timeout trace_decode trace_roundtrip other_dialects nginx_config haproxy_config)
fi
case "$seconds" in
    '' | *[!0-9]*) echo "fuzz.sh: SECONDS_PER_TARGET must be a whole number, got '$seconds'" >&2; exit 2 ;;
esac
if [ "$seconds" -eq 0 ] && [ -z "${FUZZ_RUNS:-}" ]; then
    echo "fuzz.sh: 0 seconds means forever to libFuzzer; give a time or set FUZZ_RUNS" >&2
    exit 2
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz from crates.io"
    cargo install cargo-fuzz --locked
fi

# Longest input per target: header values are short (a 256-byte list of budgets is already far
# beyond anything a client sends); a trace header can be up to 5,897 bytes, so the decoder gets
# room past that; the round trip needs about 40 bytes of structured input per span to get past
# the 64-span cap.
max_len() {
    case "$1" in
        budget_header | grpc_timeout | other_dialects) echo 256 ;;
        nginx_config | haproxy_config) echo 8192 ;;
        trace_decode) echo 8192 ;;
        trace_roundtrip) echo 4096 ;;
        *) echo 4096 ;;
    esac
}

# Release build with debug assertions and overflow checks, no sanitizer: works on stable.
build_flags=(--sanitizer none --release --debug-assertions)
cargo fuzz build "${build_flags[@]}"

failed=()
for target in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    limits=(
        -max_len="$(max_len "$target")"
        -rss_limit_mb=512   # a decoder that hoards memory fails here
        -timeout=10         # one input taking longer than this is a hang
        -print_final_stats=1
    )
    if [ -n "${FUZZ_RUNS:-}" ]; then
        limits+=(-runs="$FUZZ_RUNS")
    else
        limits+=(-max_total_time="$seconds")
    fi
    printf '\n== fuzz %s (%s)\n' "$target" "$(date -u +%H:%M:%S)"
    if ! cargo fuzz run "${build_flags[@]}" "$target" \
        "fuzz/corpus/$target" "fuzz/seeds/$target" -- "${limits[@]}"; then
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz.sh: FAILED: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, no crash"
