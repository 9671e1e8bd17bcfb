#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# HPipe results (docs/results/hpipe-*): profiles of SmolLM2-135M and a generated LLaMA-7B-shaped
# layer on this CPU (one thread = the emulated RTX 3090), then every system x prompt length on the
# emulated 2/4/6-device testbeds (predicted by the cost model + simulator; SmolLM2 also measured
# by the in-process replay up to REPLAY_MAX_LEN tokens), and simulator predictions for 8..64
# devices. Usage: bench/hpipe/run.sh [build/bin/tandem]; takes ~15-30 min on 2 busy cores.
set -euo pipefail
BIN=${1:-build/bin/tandem}
OUT=${OUT:-docs/results}
REPLAY_MAX_LEN=${REPLAY_MAX_LEN:-1024}
BATCH=${BATCH:-6}  # the paper's LLaMA-7B batch
mkdir -p "$OUT"
CL=configs/clusters/hpipe-testbed-2dev.json,configs/clusters/hpipe-testbed-4dev.json,configs/clusters/hpipe-testbed-6dev.json
SYSTEMS=base,gpipe,gp-b,terapipe,hpipe,uniform-1,uniform-2,uniform-4,uniform-8,uniform-16,uniform-32,uniform-64,uniform-128
LENS=512,1024,2048,4096,8192

[ -f "$OUT/hpipe-profile-smollm2.json" ] || "$BIN" hpipe profile -o "$OUT/hpipe-profile-smollm2.json"
[ -f "$OUT/hpipe-profile-llama7b.json" ] ||
  "$BIN" hpipe profile --synthetic llama7b --synthetic-layers 2 -o "$OUT/hpipe-profile-llama7b.json"

"$BIN" hpipe compare --profile "$OUT/hpipe-profile-smollm2.json" --cluster "$CL" --batch "$BATCH" \
  --systems "$SYSTEMS" --prompt-lens "$LENS" --replay base,gpipe,gp-b,terapipe,hpipe \
  --replay-max-len "$REPLAY_MAX_LEN" --replay-repeats 2 -o "$OUT/hpipe-compare-smollm2.json" \
  > "$OUT/hpipe-compare-smollm2.md"
# The 32-layer 7B shape (Q4_1 weights, f32 KV) does not fit the testbeds' memory / 8: plan it
# with the real 16 / 24 GB (--mem-scale 8).
"$BIN" hpipe compare --profile "$OUT/hpipe-profile-llama7b.json" --n-layers 32 --cluster "$CL" \
  --mem-scale 8 --batch "$BATCH" --systems "$SYSTEMS" --prompt-lens "$LENS" \
  -o "$OUT/hpipe-compare-llama7b.json" > "$OUT/hpipe-compare-llama7b.md"
"$BIN" hpipe scale --profile "$OUT/hpipe-profile-llama7b.json" --n-layers 64 --batch "$BATCH" \
  --devices 6,8,16,32,64 --prompt-lens 2048,4096 --systems base,gpipe,gp-b,terapipe,hpipe \
  -o "$OUT/hpipe-scale-llama7b.json" > "$OUT/hpipe-scale-llama7b.md"
python3 bench/hpipe/summarize.py "$OUT" > "$OUT/hpipe-summary.md"
