#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs tandem_bench_recsys and draws the plots into docs/results/:
#   recsys_bench.json           the raw measurements (curves, embedding GB/s, MLP GFLOP/s)
#   recsys_latency_vs_load.svg  p99 latency and throughput against clients, per model and policy
#   recsys.md                   tables of the same numbers
# Usage: scripts/recsys/bench_recsys.sh [build dir] [extra tandem_bench_recsys flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
shift || true
out=$root/docs/results
mkdir -p "$out"
"$build/bin/tandem_bench_recsys" "$@" > "$out/recsys_bench.json"
python3 "$root/scripts/recsys/plot_recsys.py" "$out/recsys_bench.json" --out-dir "$out"
