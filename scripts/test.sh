#!/usr/bin/env bash
# The whole test suite: set up, build, run every test, then fuzz the wire decoders for a
# bounded time. `scripts/test.sh asan` or `tsan` runs the suite under that sanitizer preset
# instead (no fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-default}"
jobs="${SCEPTRE_JOBS:-2}"
scripts/setup.sh
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -- -j"$jobs"
ctest --preset "$preset" -j"$jobs" --timeout 300
if [ "$preset" = default ]; then
  scripts/fuzz.sh "${SCEPTRE_FUZZ_SECONDS:-60}"
fi
