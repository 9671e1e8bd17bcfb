#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (+ address/undefined sanitizers) in build-fuzz and runs each for
# SECONDS (default 60), starting from the stored corpus. New inputs that raise coverage are written to
# build-fuzz/corpus-<target>/ (copy the interesting ones into tests/fuzz/corpus/ by hand).
# Usage: scripts/fuzz.sh [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=OFF \
  -DTANDEM_FUZZ=ON -DTANDEM_SANITIZE=address,undefined -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_EXAMPLES=OFF \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target json_inputs_fuzz
for target in json_inputs; do
  corpus=build-fuzz/corpus-$target
  mkdir -p "$corpus"
  echo "== fuzzing $target for $seconds s"
  ASAN_OPTIONS=allocator_may_return_null=1 build-fuzz/bin/${target}_fuzz "$corpus" \
    tests/fuzz/corpus/json -max_total_time="$seconds" -print_final_stats=1
done
