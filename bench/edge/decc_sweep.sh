#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# DECC and its baselines (Neurosurgeon, DADS with its DSL/DSH modes, edge-only, cloud-only) on the
# edge-cloud testbed over a bandwidth sweep that crosses DADS's 1.51 Mbps switch: `tandem edge split
# --sweep` per model, then one JSON, a table and a plot. Every delay is PREDICTED by the analytic
# cost model and the link model (no run on the engine or over a real link here).
# Usage: [MODELS=dir] [OUT=path/stem] bench/edge/decc_sweep.sh [cluster] [mbps list] [models...]
# Writes docs/results/edge-decc-sweep-<date>.{json,md,svg}.
set -euo pipefail
cd "$(dirname "$0")/../.."
cluster=${1:-configs/clusters/edge-cloud.json}
mbps=${2:-0.5,1,1.5,2,5,10,20,50,100}
shift 2 || true
models=${*:-alexnet inception_v3 resnet50 mobilenet_v2}
dir=${MODELS:-build/cnn_models}
out=${OUT:-docs/results/edge-decc-sweep-$(date +%Y%m%d)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in $models; do
  build/bin/tandem edge split --cluster "$cluster" -m "$dir/$m.onnx" --sweep "$mbps" \
    --json "$tmp/$m.json" --md "$tmp/$m.md" >/dev/null
done
python3 bench/edge/plot_decc.py --out "$out" --cluster "$cluster" \
  --command "bench/edge/decc_sweep.sh $cluster $mbps $models" "$tmp"/*.json
echo "wrote $out.{md,json,svg}"
