#!/usr/bin/env bash
# Instructions per in-process request for the enforce bench's slot variants, counted by
# callgrind: the cost of the slot queue when a slot is free (FIFO, EDF, EDF with admission),
# against the layer without slots. Each figure is (Ir of 150 samples - Ir of 50 samples) / 2000
# iterations of the divan bench, so start-up and set-up cancel out. Installs valgrind if missing.
#
# Usage: scripts/queue-callgrind.sh [VARIANT...]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v valgrind >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq valgrind >/dev/null
fi
BIN="$(cargo bench -p deadline-http --bench enforce --no-run 2>&1 | sed -n 's/.*Executable .*(\(.*\))$/\1/p' | tail -1)"
[ -x "$BIN" ] || { echo "no bench executable found" >&2; exit 1; }
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT

ir() {
    valgrind --tool=callgrind --callgrind-out-file="$OUT" "$BIN" --bench --exact "enforce::$1" \
        --sample-count "$2" --sample-size 20 >/dev/null 2>&1
    sed -n 's/^summary: //p' "$OUT"
}

VARIANTS=("$@")
if [ ${#VARIANTS[@]} -eq 0 ]; then
    VARIANTS=(with_header with_header_and_slots with_header_and_slots_edf
        with_header_and_slots_edf_admission)
fi
for variant in "${VARIANTS[@]}"; do
    short=$(ir "$variant" 50)
    long=$(ir "$variant" 150)
    printf '%-40s %8d instructions per request\n' "$variant" $(( (long - short) / 2000 ))
done
