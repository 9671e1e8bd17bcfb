#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Serves the four RecOS models (DLRM-RM2, WnD, DIN, BST) at full zoo table sizes (tables generated
# once into .temb files and mapped) under every baseline policy, and writes the tables to
# docs/results/recsys_zoo_full.md. Disk: ~11 GB of tables under $TABLE_DIR (default
# /tmp/tandem_rec_zoo); remove it afterwards.
# Usage: scripts/recsys/zoo_full_sizes.sh [build dir] [clients] [seconds]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
clients=${2:-8}
seconds=${3:-2}
dir=${TABLE_DIR:-/tmp/tandem_rec_zoo}
out=$root/docs/results/recsys_zoo_full.md
{
  echo "# Recsys models at full zoo sizes (mapped tables), every baseline policy"
  echo
  echo "\`scripts/recsys/zoo_full_sizes.sh\` on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
       "$(nproc) threads, $clients closed-loop clients, ${seconds} s per run, 4 streams, Zipf(1.05) ids;" \
       "commit $(git -C "$root" rev-parse --short HEAD). Shared VM: timings are noisy."
  echo
  first=1
  for model in rm2 wnd din bst; do
    for policy in fcfs stream-pool instances dynamic-batch; do
      "$build/bin/tandem" rec-serve --model "$model" --table-dir "$dir" --clients "$clients" \
        --duration "$seconds" --policy "$policy" --streams 4 2>/dev/null > /tmp/tandem_rec_zoo_run.md
      if [ $first = 1 ]; then sed -n 1,2p /tmp/tandem_rec_zoo_run.md; first=0; fi
      sed -n 3p /tmp/tandem_rec_zoo_run.md
    done
  done
  echo
  echo "Table bytes (f32): rm2 4.1 GB, wnd 3.5 GB, din 2.7 GB, bst 0.9 GB (\`ModelConfig::table_bytes\`)."
} > "$out"
echo "wrote $out"
