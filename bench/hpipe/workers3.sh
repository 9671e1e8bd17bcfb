# SPDX-License-Identifier: Apache-2.0
# Sourced by the HPipe loopback benchmarks (w2w.sh, workers.sh): start_workers3 TANDEM OUTDIR makes a
# cluster key OUTDIR/cluster.key, starts the workers fast, mid and slow (`tandem worker`, tcp loopback,
# one thread each, logs in OUTDIR), kills them on exit, waits for their endpoints and sets
# W="fast=EP,mid=EP,slow=EP" for `tandem pipeline run --workers`.
start_workers3() {
  local T=$1 D=$2 n i
  $T worker --gen-key $D/cluster.key
  WORKER_PIDS=()
  for n in fast mid slow; do
    rm -f $D/$n.ep
    $T worker --listen tcp://127.0.0.1:0 --key $D/cluster.key --endpoint-file $D/$n.ep -t 1 > $D/$n.log 2>&1 &
    WORKER_PIDS+=($!)
  done
  trap 'kill ${WORKER_PIDS[*]} 2>/dev/null' EXIT
  for n in fast mid slow; do for i in $(seq 100); do [ -s $D/$n.ep ] && break; sleep 0.1; done; done
  W="fast=$(cat $D/fast.ep),mid=$(cat $D/mid.ep),slow=$(cat $D/slow.ep)"
}
