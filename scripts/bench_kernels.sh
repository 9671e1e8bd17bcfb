#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the kernel performance suite (tandem_bench_kernels, built beforehand; this script builds nothing)
# with repetitions and random interleaving, then writes bench/results/kernels-<host>-<date>.json through
# scripts/bench_report.py and prints its markdown tables on stdout. Progress goes to stderr.
#
#   cmake --build build --target tandem_bench_kernels
#   scripts/bench_kernels.sh                        # the whole suite: ~2 min on a quiet 2-core VM
#   scripts/bench_kernels.sh --filter '^gemm/smollm2' --repetitions 5
#   scripts/bench_kernels.sh --openblas-unpinned    # adds an OpenBLAS pass with OPENBLAS_CORETYPE unset
#
# OPENBLAS_CORETYPE is never changed for the main pass. --openblas-unpinned only matters where it is
# set (these machines pin OpenBLAS to Haswell kernels, about half speed); that second pass is
# labelled openblas_unpinned in the results.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
build_dir="${TANDEM_BUILD_DIR:-$root/build}"
bin=""
repetitions=5
min_time=0.05
filter="."
out_dir="$root/bench/results"
unpinned=0
plot=1

usage() {
  sed -n '3,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
  cat <<EOF
Options:
  --build-dir DIR        build tree holding bin/tandem_bench_kernels (default: \$TANDEM_BUILD_DIR or build)
  --bin PATH             the benchmark binary itself (overrides --build-dir)
  --repetitions N        repetitions per benchmark (default $repetitions)
  --min-time SECONDS     minimum timed duration per repetition (default $min_time)
  --filter REGEX         Google Benchmark filter (default: everything)
  --out-dir DIR          where the result JSON goes (default bench/results)
  --openblas-unpinned    also run the OpenBLAS cases with OPENBLAS_CORETYPE unset (labelled)
  --no-plot              do not call scripts/plot_bench.py
EOF
}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --repetitions) repetitions="$2"; shift 2 ;;
    --min-time) min_time="$2"; shift 2 ;;
    --filter) filter="$2"; shift 2 ;;
    --out-dir) out_dir="$2"; shift 2 ;;
    --openblas-unpinned) unpinned=1; shift ;;
    --no-plot) plot=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_kernels.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

[[ -n "$bin" ]] || bin="$build_dir/bin/tandem_bench_kernels"
if [[ ! -x "$bin" ]]; then
  echo "bench_kernels.sh: $bin not found; build it first:" >&2
  echo "  cmake -S $root -B $build_dir -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build $build_dir --target tandem_bench_kernels" >&2
  exit 1
fi
command -v python3 >/dev/null || { echo "bench_kernels.sh: python3 is needed for the report" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
common=(--benchmark_format=json --benchmark_out_format=json
        --benchmark_repetitions="$repetitions" --benchmark_min_time="$min_time"
        --benchmark_enable_random_interleaving=true)

echo "bench_kernels.sh: running $bin (repetitions $repetitions, min time ${min_time}s, filter '$filter')" >&2
start=$(date +%s)
"$bin" "${common[@]}" --benchmark_filter="$filter" --benchmark_out="$work/main.json" >"$work/stdout.json"
wall=$(( $(date +%s) - start ))
echo "bench_kernels.sh: main pass took ${wall}s" >&2

host="$(hostname -s 2>/dev/null || hostname)"
result="$out_dir/kernels-$host-$(date +%Y%m%d).json"
report_args=(--raw "$work/main.json" --out "$result" --wall-s "$wall"
             --repetitions "$repetitions" --min-time "$min_time" --filter "$filter")
if [[ $unpinned -eq 1 ]]; then
  if [[ -n "${OPENBLAS_CORETYPE:-}" ]]; then
    echo "bench_kernels.sh: second pass: OpenBLAS with OPENBLAS_CORETYPE unset (was $OPENBLAS_CORETYPE)" >&2
    # The OpenBLAS cases among those the filter selects, as one alternation of exact names (Google
    # Benchmark's POSIX regex has no lookahead to intersect two patterns).
    names="$("$bin" --benchmark_list_tests --benchmark_filter="$filter" 2>/dev/null |
             grep -E '/openblas(/real_time)?$' | sed 's/[.[\]*^$+?(){}|]/\\&/g' | paste -sd '|' -)"
    if [[ -n "$names" ]]; then
      env -u OPENBLAS_CORETYPE "$bin" "${common[@]}" --benchmark_filter="^($names)\$" \
        --benchmark_out="$work/unpinned.json" >/dev/null
      report_args+=(--raw-unpinned "$work/unpinned.json")
    else
      echo "bench_kernels.sh: the filter selects no OpenBLAS case; no second pass" >&2
    fi
  else
    echo "bench_kernels.sh: OPENBLAS_CORETYPE is not set: the main pass already runs OpenBLAS unpinned" >&2
  fi
fi

mkdir -p "$out_dir"
python3 "$here/bench_report.py" "${report_args[@]}"
if [[ $plot -eq 1 ]]; then
  python3 "$here/plot_bench.py" "$result" || echo "bench_kernels.sh: plotting failed (results are kept)" >&2
fi
