#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (+ address/undefined sanitizers) in build-fuzz and runs each for
# SECONDS (default 60), starting from the stored corpus. New inputs that raise coverage are written to
# build-fuzz/corpus-<target>/ (copy the interesting ones into tests/fuzz/corpus/ by hand).
# Usage: scripts/fuzz.sh [seconds] [targets...]   (BUILD_DIR overrides build-fuzz)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=${*:-json_inputs gguf tokenizer onnx_import sched_wire pipeline_plan kv_calibration recsys_config \
  recsys_weights embedding_table recflow_requests}
build=${BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CUDA=OFF \
  -DTANDEM_FUZZ=ON -DTANDEM_SANITIZE=address,undefined -DTANDEM_BUILD_BENCH=OFF -DTANDEM_BUILD_EXAMPLES=OFF \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
fuzz_binaries=()
for target in $targets; do fuzz_binaries+=("${target}_fuzz"); done
cmake --build "$build" -j "$(nproc)" --target "${fuzz_binaries[@]}"
declare -A seeds=([json_inputs]=json [gguf]=gguf [tokenizer]=tokenizer [onnx_import]=onnx
  [sched_wire]=sched_wire [pipeline_plan]=pipeline_plan [kv_calibration]=kv_calibration
  [recsys_config]=recsys_config [recsys_weights]=recsys_weights [embedding_table]=embedding_table
  [recflow_requests]=recflow_requests)
for target in $targets; do
  corpus=$build/corpus-$target
  mkdir -p "$corpus"
  echo "== fuzzing $target for $seconds s"
  # halt_on_error: UBSan's checks recover by default, so a report would otherwise scroll past.
  ASAN_OPTIONS=allocator_may_return_null=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/bin/${target}_fuzz" "$corpus" \
    "tests/fuzz/corpus/${seeds[$target]}" -max_total_time="$seconds" -print_final_stats=1
done
