#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# RecStream online switching against fixed stream configurations under a load that changes
# (docs/results/recsys-recstream-online-*.md): the same closed-loop phases (rec-serve
# --load-phases) on a simulated device under each of the ten fixed configurations, under
# --recstream WEIGHTS and under --recstream hill; one rec-serve JSON per run in OUT, then a table
# of p99 per phase (recstream_online_table.py).
#   bench/recsys/recstream_online.sh [build] [model] [phases] [period_s] [out]
set -euo pipefail
BUILD=${1:-build}
MODEL=${2:-tiny-bst}
PHASES=${3:-8:0.01,8:0.09,64:0.01,64:0.09}
PERIOD=${4:-0.01}
OUT=${5:-recstream-online}
WEIGHTS=${WEIGHTS:-configs/recsys/recstream/sim-h100.json}
mkdir -p "$OUT"
common=(--model "$MODEL" --device sim:h100 --load-phases "$PHASES" --warmup 0.002 -o json)
for p in stream-pool recos; do
  for k in 1 2 4 8 16; do
    "$BUILD/bin/tandem" rec-serve "${common[@]}" --policy "$p" --streams "$k" \
      > "$OUT/fixed-$p-$k.json" 2>/dev/null
  done
done
for r in "$WEIGHTS" hill; do
  name=online-$([ "$r" = hill ] && echo hill || echo weights)
  "$BUILD/bin/tandem" rec-serve "${common[@]}" --recstream "$r" --recstream-period "$PERIOD" \
    --recstream-window "$PERIOD" > "$OUT/$name.json" 2>/dev/null
done
python3 "$(dirname "$0")/recstream_online_table.py" "$OUT"
