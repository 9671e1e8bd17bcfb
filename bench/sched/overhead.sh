#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Per-packet cost of the pipeline runtime (tandem pipeline overhead) against memcpy and raw ZeroMQ,
# written to docs/results/sched-overhead.{json,md}.
# Usage: bench/sched/overhead.sh [build dir]   (default: build)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${1:-$root/build}/bin/tandem"
out="$root/docs/results"
mkdir -p "$out"
cmd=("$bin" pipeline overhead --sizes 4096,65536,1048576,16777216 --reps 30 --json "$out/sched-overhead.json")
{
  echo "# Pipeline runtime: per-packet round trip (µs, median / best)"
  echo
  echo "Command: \`bench/sched/overhead.sh\` (runs \`tandem pipeline overhead --sizes 4096,65536,1048576,16777216 --reps 30\`)."
  echo
  "${cmd[@]}"
} > "$out/sched-overhead.md"
cat "$out/sched-overhead.md"
