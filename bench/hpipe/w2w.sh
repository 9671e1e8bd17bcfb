#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# HPipe on SmolLM2 over 3 local `tandem worker` processes (tcp loopback, CURVE key): hub and spoke vs
# worker to worker at L = 512 and 1024, REPS interleaved rounds (default 3). Writes one run JSON per
# (round, L, topology) into OUTDIR, then the summary (docs/results/hpipe-w2w-*.{md,json}) with
# bench/hpipe/w2w_summary.py. Usage: bench/hpipe/w2w.sh TANDEM OUTDIR [REPS] (from the repo root)
set -eu
T=$1; D=$2; REPS=${3:-3}; REQUESTS=${REQUESTS:-2}
C=configs/clusters/hetero3.json
mkdir -p $D
for L in 512 1024; do
  $T hpipe plan --profile docs/results/hpipe-profile-smollm2.json --cluster $C --prompt-len $L \
      --system hpipe -o $D/plan-L$L.json > $D/plan-L$L.out 2>&1 || { cat $D/plan-L$L.out; exit 1; }
done
. bench/hpipe/workers3.sh
start_workers3 $T $D
# --no-links: an emulated link models the hop itself and keeps it hub and spoke; here the real
# loopback hops are compared. --last-only: the head returns the last token's logits only.
for r in $(seq $REPS); do
  for L in 512 1024; do
    for topo in hub w2w; do
      $T pipeline run --plan $D/plan-L$L.json --cluster $C --no-links --key $D/cluster.key \
          --workers $W --vocab 49152 --requests $REQUESTS --last-only --verify --topology $topo \
          --json $D/run-$topo-L$L-r$r.json > $D/run-$topo-L$L-r$r.out 2>&1
      tail -1 $D/run-$topo-L$L-r$r.out
    done
  done
done
