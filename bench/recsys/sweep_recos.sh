#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The RecOS alpha / beta / horizon sweep (recsys spec §2.3: "calibrate by sweep"): closed-loop p99
# of `recos` on a simulated H100 for each (alpha, beta, H), per model, at CLIENTS clients; one JSON
# line per point on stdout (rec-serve -o json results plus the parameters).
#   bench/recsys/sweep_recos.sh [build] [models] [clients] [device] > sweep.jsonl
set -euo pipefail
BUILD=${1:-build}
MODELS=${2:-rm2,bst}
CLIENTS=${3:-32}
DEVICE=${4:-sim:h100}
DURATION=${DURATION:-0.02}
for m in ${MODELS//,/ }; do
  for h in 10 2; do  # µs: about 2x and 0.4x the median op on sim:h100
    for a in 0 1 4; do
      for b in 0 16; do
        "$BUILD/bin/tandem" rec-serve --model "$m" --device "$DEVICE" --clients "$CLIENTS" \
          --duration "$DURATION" --warmup "$(python3 -c "print($DURATION / 10)")" \
          --policy recos --table-budget 256 --alpha "$a" --beta "$b" --horizon-us "$h" \
          -o json 2>/dev/null |
          python3 -c "import json,sys; j=json.load(sys.stdin); r=j['results']; print(json.dumps({'model': '$m', 'device': '$DEVICE', 'clients': $CLIENTS, 'alpha': $a, 'beta': $b, 'horizon_us': $h, 'p50_ms': r['latency_ms']['p50'], 'p99_ms': r['latency_ms']['p99'], 'qps': r['throughput_qps'], 'sched_us_per_op': r['scheduler']['sched_us_per_op']}))"
      done
    done
  done
done
