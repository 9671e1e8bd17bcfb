#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# HPipe and its baselines (Base, GPipe, GP-B, TeraPipe) on SmolLM2 over 3 local `tandem worker`
# processes (tcp loopback, CURVE key, worker to worker) at L = 512 and 1024: each system's plan
# (batch BATCH, default 2) runs through `tandem pipeline run` with --verify, REPS interleaved rounds
# (default 3; the system order rotates each round; FIRST_ROUND=k starts at round k, e.g. to redo a
# round into the same OUTDIR), the 1-minute load average recorded beside each
# run. The planners price the plans with OUTDIR/hpipe-profile-smollm2.json, profiled first on this
# machine when absent. Writes plans and one run JSON per (round, L, system) into OUTDIR; summarise
# with bench/hpipe/workers_summary.py. Usage: bench/hpipe/workers.sh TANDEM OUTDIR [REPS] (repo root)
set -eu
T=$1; D=$2; REPS=${3:-3}; BATCH=${BATCH:-2}
C=configs/clusters/hetero3.json
P=$D/hpipe-profile-smollm2.json
SYSTEMS=(base gpipe gp-b terapipe hpipe)
mkdir -p $D
if [ ! -f $P ]; then
  cut -d' ' -f1 /proc/loadavg > $P.load
  $T hpipe profile -o $P > $D/profile.out 2>&1 || { cat $D/profile.out; exit 1; }
fi
for L in 512 1024; do
  for s in "${SYSTEMS[@]}"; do
    $T hpipe plan --profile $P --cluster $C --prompt-len $L \
        --system $s --batch $BATCH -o $D/plan-$s-L$L.json > $D/plan-$s-L$L.out 2>&1 \
        || { cat $D/plan-$s-L$L.out; exit 1; }
  done
done
. bench/hpipe/workers3.sh
start_workers3 $T $D
# --no-links: the real loopback hops (worker to worker), not emulated 1 Gbps links. No --requests:
# each run is the plan's batch (micro_batches requests of batch / micro_batches prompts).
for r in $(seq ${FIRST_ROUND:-1} $REPS); do
  for L in 512 1024; do
    for k in $(seq 0 $((${#SYSTEMS[@]} - 1))); do
      s=${SYSTEMS[$(( (k + r - 1) % ${#SYSTEMS[@]} ))]}
      cut -d' ' -f1 /proc/loadavg > $D/run-$s-L$L-r$r.load
      $T pipeline run --plan $D/plan-$s-L$L.json --cluster $C --no-links --key $D/cluster.key \
          --workers $W --vocab 49152 --last-only --verify --json $D/run-$s-L$L-r$r.json \
          > $D/run-$s-L$L-r$r.out 2>&1
      echo "$s L=$L r=$r: $(grep 'measured latency' $D/run-$s-L$L-r$r.out)"
    done
  done
done
