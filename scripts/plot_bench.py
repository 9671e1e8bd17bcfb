#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws a bar chart PNG of a tandem kernel benchmark result (scripts/bench_report.py output).

Top: GFLOP/s of every compute-bound case (GEMM, 3x3 conv) per implementation, one panel per thread
count, with the measured FMA peak as a line. Bottom: GB/s of the memory-bound "stream" cases against
the measured triad bandwidth. Needs matplotlib (Debian: python3-matplotlib); without it, says so and
exits 0 without a plot.

    scripts/plot_bench.py bench/results/kernels-host-20250101.json [-o out.png]
"""

import argparse
import json
import os
import sys

COLORS = {"tandem": "#1b6ca8", "onednn": "#e07b39", "onednn_blocked": "#f2b36f",
          "openblas": "#3a9e5c", "openblas_unpinned": "#8fd19e"}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("result", help="kernels-<host>-<date>.json")
    ap.add_argument("-o", "--output", help="PNG path (default: the result path with .png)")
    args = ap.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench.py: matplotlib is not installed (Debian: apt-get install python3-matplotlib);"
              " no plot written", file=sys.stderr)
        return 0
    with open(args.result, encoding="utf-8") as f:
        result = json.load(f)
    out = args.output or os.path.splitext(args.result)[0] + ".png"

    ceilings = result.get("ceilings") or {}
    compute = [b for b in result["benchmarks"] if b["kind"] in ("gemm", "conv3x3")]
    memory = [b for b in result["benchmarks"]
              if b["kind"] not in ("gemm", "conv3x3") and b["case"].endswith(".stream")
              and b.get("gbyte_per_s")]
    threads = sorted({b["threads"] for b in compute})
    impls = [i for i in COLORS if any(b["impl"] == i for b in compute)]
    panels = len(threads) + (1 if memory else 0)
    if panels == 0:
        print("plot_bench.py: nothing to plot", file=sys.stderr)
        return 0
    fig, axes = plt.subplots(panels, 1, figsize=(16, 5 * panels), squeeze=False)

    for ax, t in zip(axes[:, 0], threads):
        cases = []
        for b in compute:
            key = f'{b["kind"]}/{b["case"]}'
            if b["threads"] == t and key not in cases:
                cases.append(key)
        width = 0.8 / max(len(impls), 1)
        for j, impl in enumerate(impls):
            values = []
            for key in cases:
                match = [b for b in compute if f'{b["kind"]}/{b["case"]}' == key
                         and b["threads"] == t and b["impl"] == impl and b.get("gflop_per_s")]
                values.append(match[0]["gflop_per_s"]["best"] if match else 0.0)
            xs = [i + (j - (len(impls) - 1) / 2) * width for i in range(len(cases))]
            ax.bar(xs, values, width, label=impl, color=COLORS[impl])
        peak = ceilings.get("fma_peak_1t_flops" if t == 1 else "fma_peak_nt_flops")
        if peak:
            ax.axhline(peak / 1e9, color="gray", linestyle="--", linewidth=1,
                       label=f"FMA peak ({peak / 1e9:.0f} GFLOP/s)")
        ax.set_xticks(range(len(cases)))
        ax.set_xticklabels([c.replace("/", "\n", 1) for c in cases], rotation=60, ha="right",
                           fontsize=7)
        ax.set_ylabel("GFLOP/s (best of repetitions)")
        ax.set_title(f"Compute-bound kernels, {t} thread{'s' if t > 1 else ''}")
        ax.legend(fontsize=8)

    if memory:
        ax = axes[-1, 0]
        labels = [f'{b["kind"]}/{b["case"]} t{b["threads"]}' for b in memory]
        values = [b["gbyte_per_s"]["best"] for b in memory]
        ax.bar(range(len(memory)), values, color=COLORS["tandem"], label="tandem")
        for t, key in ((1, "triad_1t_bytes_per_s"), (ceilings.get("threads"), "triad_nt_bytes_per_s")):
            if ceilings.get(key):
                ax.axhline(ceilings[key] / 1e9, linestyle="--", linewidth=1,
                           color="gray" if t == 1 else "black",
                           label=f"triad, {t} thread(s) ({ceilings[key] / 1e9:.1f} GB/s)")
        ax.set_xticks(range(len(memory)))
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_ylabel("GB/s (best of repetitions)")
        ax.set_title("Memory-bound kernels (working set past the caches)")
        ax.legend(fontsize=8)

    system = result.get("system", {})
    fig.suptitle(f'tandem kernels on {system.get("cpu_model", "?")} '
                 f'(OPENBLAS_CORETYPE={system.get("env", {}).get("OPENBLAS_CORETYPE") or "unset"}), '
                 f'{result.get("created_utc", "")}', fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot_bench.py: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
