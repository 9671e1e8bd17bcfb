#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# B7 on the simulated GPU (docs/results/recsys-gpu-cache-*.md): rm2 with Zipf ids, tables in host
# memory behind the GPU cache (rec-serve --gpu-cache-mib), at cache sizes of 1%, 5% and 20% of the
# rows, under: tables in HBM (reference), no cache, synchronous-only insertion (tau 1),
# tau-threshold insertion, tau-threshold + prefetch; 16 and 32 closed-loop clients. One rec-serve
# JSON per run in OUT, then the table (b7_gpu_cache_table.py). Two runs at a time.
#   bench/recsys/b7_gpu_cache.sh [build] [out]
set -euo pipefail
BUILD=${1:-build}
OUT=${2:-b7-gpu-cache}
mkdir -p "$OUT"
# rm2 fitted to the default 1024 MiB table budget: 32 tables x 131072 rows of dim 64; a cached row
# costs 64 * 4 + 8 + 4 = 268 bytes, so all rows = 32 * 131072 * 268 B = 1072 MiB.
ALL_MIB=1072
common=(--model rm2 --device sim:h100 --sim-timing-only --policy recos --duration 0.1
        --warmup 0.02 --pool 128 --seed 1 -o json)
jobs_list=()
for c in 16 32; do
  jobs_list+=("hbm-c$c|--clients $c")
  jobs_list+=("none-c$c|--clients $c --gpu-cache-mib 0")
  for pct in 1 5 20; do
    mib=$(python3 -c "print(round($ALL_MIB * $pct / 100, 2))")
    jobs_list+=("sync-$pct-c$c|--clients $c --gpu-cache-mib $mib --gpu-cache-tau 1")
    jobs_list+=("tau0.25-$pct-c$c|--clients $c --gpu-cache-mib $mib --gpu-cache-tau 0.25")
    jobs_list+=("tau0.25-prefetch-$pct-c$c|--clients $c --gpu-cache-mib $mib --gpu-cache-tau 0.25 --gpu-cache-prefetch")
    if [ "$pct" = 5 ]; then
      jobs_list+=("tau0.9-$pct-c$c|--clients $c --gpu-cache-mib $mib --gpu-cache-tau 0.9")
      jobs_list+=("tau0.9-prefetch-$pct-c$c|--clients $c --gpu-cache-mib $mib --gpu-cache-tau 0.9 --gpu-cache-prefetch")
    fi
  done
done
run() {
  local name=${1%%|*} args=${1#*|}
  # shellcheck disable=SC2086
  nice -n 19 "$BUILD/bin/tandem" rec-serve "${common[@]}" $args > "$OUT/$name.json" 2>/dev/null
}
for j in "${jobs_list[@]}"; do
  run "$j" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
done
wait
python3 "$(dirname "$0")/b7_gpu_cache_table.py" "$OUT"
