#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Throughput at a fixed KV memory budget: how many sequences each KV policy fits in the memory that
# BASE_SEQS full-cache sequences take, and the batched generation throughput at that batch size.
#   1. one sequence per policy (`tandem generate`, batch 1): measured KV bytes per sequence at the
#      end of the run (prompt + generated tokens, after the policy compressed the cache);
#   2. M = BASE_SEQS x the full cache's bytes; B = min(MAX_BATCH, floor(M / bytes per sequence));
#   3. `tandem generate --batch B` per policy: batch decode tokens/s, total throughput, KV bytes and
#      the allocator's peak tensor memory.
# Raw stderr logs go to $OUT_DIR/logs; scripts/llm/kv_throughput_report.py turns them into
# docs/results/kv-throughput.{json,md}.
# Usage: scripts/llm/kv_throughput.sh [tandem binary] (env: OUT_DIR, PROMPT_CHARS, NEW_TOKENS,
#        BASE_SEQS, MAX_BATCH, BUDGET, THREADS, POLICIES)
set -euo pipefail

tandem=${1:-build/bin/tandem}
out=${OUT_DIR:-/tmp/kv-throughput}
chars=${PROMPT_CHARS:-3800}
new_tokens=${NEW_TOKENS:-64}
base_seqs=${BASE_SEQS:-2}
max_batch=${MAX_BATCH:-16}
budget=${BUDGET:-128}
threads=${THREADS:-1}
policies=${POLICIES:-full snapkv clusterattn clusterattn+qokv}
text=${TANDEM_TEXT_DIR:-$HOME/.cache/tandem/texts}/prideprejudice.txt
calib="clusterattn=docs/results/kv-eviction-clusterattn-calibration.json,qokv=docs/results/kv-quant-qokv-calibration.json"

[[ -f $text ]] || { echo "kv_throughput.sh: $text missing: run scripts/llm/get_texts.sh" >&2; exit 2; }
mkdir -p "$out/logs"
uptime >"$out/uptime-start.txt"
prompt=$(head -c "$chars" "$text")

policy_args() {  # the --kv-* options of one policy
  if [[ $1 == full ]]; then echo "--kv-policy full"; else
    echo "--kv-policy $1 --kv-budget $budget --kv-calibration $calib"; fi
}
logname() { echo "${1//+/_}"; }

for p in $policies; do
  # shellcheck disable=SC2046
  "$tandem" generate -p "$prompt" -n "$new_tokens" -t "$threads" $(policy_args "$p") \
    >/dev/null 2>"$out/logs/single-$(logname "$p").log"
  grep -o 'KV cache [^,]*bytes' "$out/logs/single-$(logname "$p").log" | sed "s/^/$p: /"
done

full_bytes=$(grep -o '([0-9]* bytes, policy' "$out/logs/single-full.log" | grep -o '[0-9]*')
budget_bytes=$((base_seqs * full_bytes))
echo "M = $base_seqs x $full_bytes = $budget_bytes bytes"
: >"$out/batches.txt"
for p in $policies; do
  seq_bytes=$(grep -o '([0-9]* bytes, policy' "$out/logs/single-$(logname "$p").log" | grep -o '[0-9]*')
  b=$((budget_bytes / seq_bytes))
  ((b > max_batch)) && b=$max_batch
  echo "$p $b" >>"$out/batches.txt"
  echo "$p: $seq_bytes bytes per sequence -> batch $b"
  # shellcheck disable=SC2046
  "$tandem" generate -p "$prompt" -n "$new_tokens" -t "$threads" --batch "$b" $(policy_args "$p") \
    >/dev/null 2>"$out/logs/batch-$(logname "$p").log"
  tail -3 "$out/logs/batch-$(logname "$p").log"
done
uptime >"$out/uptime-end.txt"
cat "$out/uptime-start.txt" "$out/uptime-end.txt"
