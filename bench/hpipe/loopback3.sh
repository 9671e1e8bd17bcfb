#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# 3-worker loopback run of SmolLM2 (issue 6): hpipe plan, 3 tandem workers, fault-free run, wrong-key
# coordinator, kill -9 of the mid worker mid-run. Usage: bench/hpipe/loopback3.sh TANDEM OUTDIR (from the repo root)
set -u
T=$1; D=$2; mkdir -p $D

$T hpipe plan --profile docs/results/hpipe-profile-smollm2.json --cluster configs/clusters/hetero3.json --prompt-len 256 --system hpipe -o $D/plan.json > $D/plan.out 2>&1 || { cat $D/plan.out; exit 1; }
$T worker --gen-key $D/cluster.key
$T worker --gen-key $D/other.key
for n in fast mid slow; do
  $T worker --listen tcp://127.0.0.1:0 --key $D/cluster.key --endpoint-file $D/$n.ep -t 1 > $D/$n.log 2>&1 &
  echo $! > $D/$n.pid
done
for n in fast mid slow; do for i in $(seq 100); do [ -s $D/$n.ep ] && break; sleep 0.1; done; done
W="fast=$(cat $D/fast.ep),mid=$(cat $D/mid.ep),slow=$(cat $D/slow.ep)"
echo "workers $W"
# 1: fault-free
/usr/bin/time -f "%e s wall" $T pipeline run --plan $D/plan.json --cluster configs/clusters/hetero3.json --key $D/cluster.key --workers $W --vocab 49152 --requests 4 --verify --json $D/clean.json > $D/clean.out 2>&1; echo "clean rc $?"
# 2: wrong key
$T pipeline run --plan $D/plan.json --cluster configs/clusters/hetero3.json --key $D/other.key --workers $W --vocab 49152 --requests 1 > $D/wrongkey.out 2>&1; echo "wrongkey rc $?"
# 3: kill -9 the mid worker 2 s into the run
( sleep ${KILL_AFTER:-2}; kill -9 $(cat $D/mid.pid); date +%s.%N > $D/killed_at ) &
KILLER=$!
$T pipeline run --plan $D/plan.json --cluster configs/clusters/hetero3.json --key $D/cluster.key --workers $W --vocab 49152 --requests 4 --verify --json $D/killed.json > $D/killed.out 2>&1; echo "killed rc $?"
wait $KILLER
for n in fast slow; do kill $(cat $D/$n.pid) 2>/dev/null; wait $(cat $D/$n.pid) 2>/dev/null; done
