#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The recsys checks that need a GPU, for a run on a machine with one (cuda:0):
#   1. embedding_bag on cuda:0 against the CPU reference (tandem_consistency_tests on cuda),
#   2. the tiny zoo models on cuda:0 against the CPU, and concurrent serving over the
#      DeviceExecutor against sequential GPU execution (tandem_recsys_cuda_tests),
#   3. a short `tandem rec-serve --device cuda:0` with 1 and 8 clients under fcfs and stream-pool,
#      printing throughput and latency percentiles (markdown rows).
# TANDEM_REQUIRE_GPU=1 turns the tests' "no GPU" skips into failures.
# Usage: scripts/recsys/gpu_check.sh [build dir] [model (default rm2)] [seconds per run (default 3)]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
model=${2:-rm2}
secs=${3:-3}
export TANDEM_REQUIRE_GPU=1
status=0

echo "== embedding_bag on cuda:0 vs the CPU reference"
TANDEM_CONSISTENCY_DEVICE=cuda "$build/bin/tandem_consistency_tests" --gtest_filter='EmbeddingBag.*' --gtest_brief=1 ||
  status=1
echo "== recsys models and DeviceExecutor on cuda:0"
"$build/bin/tandem_recsys_cuda_tests" --gtest_brief=1 || status=1

echo "== rec-serve --device cuda:0 (model $model, ${secs}s per run)"
for policy in fcfs stream-pool; do
  for clients in 1 8; do
    "$build/bin/tandem" rec-serve --device cuda:0 --model "$model" --policy "$policy" \
      --clients "$clients" --duration "$secs" --warmup 0.5 --table-budget 512 |
      grep -E '^\| ' | tail -n 1 || status=1
  done
done
echo "== the same on the CPU, for comparison"
"$build/bin/tandem" rec-serve --device cpu --model "$model" --policy stream-pool --clients 8 \
  --duration "$secs" --warmup 0.5 --table-budget 512 | grep -E '^\| ' | tail -n 1 || status=1
exit $status
