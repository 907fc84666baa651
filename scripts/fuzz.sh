#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for a bounded time (seconds, default
# 60), starting from the saved inputs in tests/fuzz/regressions/<target>/. A crash fails the
# run and leaves the input as crash-* in the build folder: add it to the regressions folder,
# where the wire_test suite replays it on every build.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -- -j"${SCEPTRE_JOBS:-2}"
for target in frame_fuzz message_fuzz; do
  corpus="build/fuzz/corpus/$target"
  mkdir -p "$corpus"
  echo "fuzz: $target for ${seconds}s"
  (cd build/fuzz && "./tests/fuzz/$target" -max_total_time="$seconds" -max_len=4096 \
      -rss_limit_mb=1024 -print_final_stats=1 "corpus/$target" "../../tests/fuzz/regressions/$target" \
      2>&1 | tail -n 12)
done
