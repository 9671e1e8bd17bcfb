#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A pipeline over real packets between network namespaces: the coordinator in one namespace, two
# `tandem worker` processes in two others, joined by a bridge in a fourth ("hub") namespace, the
# second worker's link shaped to 50 Mbit/s by tc tbf. Checks that the run's outputs are bit-exact
# with a sequential run (--verify). Exits 77 (skipped) when not root or when namespaces, veth or
# tbf are unavailable. Traffic stays inside namespaces this script creates; a trap removes them.
# Usage: netns_pipeline.sh TANDEM_BINARY SOURCE_DIR
set -uo pipefail
bin="$1"
src="$2"
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root"; exit 77; }
command -v ip >/dev/null || { echo "skip: no iproute2"; exit 77; }
tag="ts$$"
hub="${tag}hub"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for i in 0 1 2; do ip netns del "${tag}pe$i" 2>/dev/null; done
  ip netns del "$hub" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
ip netns add "$hub" || { echo "skip: ip netns add failed"; exit 77; }
ip -n "$hub" link add br0 type bridge || { echo "skip: no bridge"; exit 77; }
ip -n "$hub" link set br0 up
for i in 0 1 2; do
  ns="${tag}pe$i"
  ip netns add "$ns" || exit 77
  ip link add "v$i$tag" netns "$ns" type veth peer name "b$i$tag" netns "$hub" || { echo "skip: no veth"; exit 77; }
  ip -n "$hub" link set "b$i$tag" master br0 up
  ip -n "$ns" addr add "10.201.0.$((i + 1))/24" dev "v$i$tag"
  ip -n "$ns" link set "v$i$tag" up
  ip -n "$ns" link set lo up
done
if ! ip netns exec "${tag}pe2" tc qdisc add dev "v2$tag" root tbf rate 50mbit burst 32kbit latency 50ms; then
  echo "skip: tc tbf unavailable"
  exit 77
fi
"$bin" worker --gen-key "$work/cluster.key" >/dev/null || exit 1
for i in 1 2; do
  ip netns exec "${tag}pe$i" "$bin" worker --listen "tcp://10.201.0.$((i + 1)):5555" \
    --key "$work/cluster.key" --endpoint-file "$work/w$i.ep" -t 1 2>"$work/w$i.log" &
  pids+=($!)
done
for _ in $(seq 1 250); do
  [ -s "$work/w1.ep" ] && [ -s "$work/w2.ep" ] && break
  sleep 0.04
done
[ -s "$work/w1.ep" ] && [ -s "$work/w2.ep" ] || { echo "workers did not start"; cat "$work"/w*.log; exit 1; }
timeout 60 ip netns exec "${tag}pe0" "$bin" pipeline run --plan "$src/bench/sched/mlp3.plan.json" \
  --cluster "$src/configs/clusters/hetero3.json" --key "$work/cluster.key" --requests 2 \
  --workers "mid=$(cat "$work/w1.ep"),slow=$(cat "$work/w2.ep")" --verify --json "$work/run.json"
rc=$?
[ $rc -eq 0 ] || { echo "pipeline run failed ($rc)"; cat "$work"/w*.log; exit 1; }
grep -q '"bit_exact": 8' "$work/run.json" || { echo "outputs differ"; cat "$work/run.json"; exit 1; }
echo "netns pipeline: ok"
