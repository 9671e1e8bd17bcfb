#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws tandem_bench_recsys output: latency-vs-load curves as SVG plus Markdown tables.

    python3 scripts/recsys/plot_recsys.py docs/results/recsys_bench.json --out-dir docs/results

Writes recsys_latency_vs_load.svg (per model: p99 and p50 latency, and throughput, against the
number of closed-loop clients, one line per policy) and recsys.md. Standard library only.
"""
import argparse
import json
import math
import os

COLOURS = {"fcfs": "#d62728", "stream-pool": "#1f77b4", "instances": "#2ca02c",
           "dynamic-batch": "#9467bd"}


def nice_ticks(lo, hi, log):
    if log:
        a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
        return [10 ** e for e in range(a, b + 1)]
    step = 10 ** (math.floor(math.log10(max(hi - lo, 1e-9))) - 1)
    for m in (1, 2, 5, 10, 20, 50, 100):
        if (hi - lo) / (step * m) <= 7:
            step *= m
            break
    t, out = 0.0, []
    while t <= hi * 1.0001:
        if t >= lo:
            out.append(t)
        t += step
    return out


class Panel:
    def __init__(self, x, y, w, h, xs, ylo, yhi, ylog, title, ylabel):
        self.x, self.y, self.w, self.h = x, y, w, h
        self.xlo, self.xhi = math.log2(min(xs)), math.log2(max(xs))
        if self.xhi == self.xlo:
            self.xhi += 1
        self.ylog = ylog
        if ylog:
            ylo, yhi = max(ylo, 1e-3), max(yhi, ylo * 10)
            self.ylo, self.yhi = 10 ** math.floor(math.log10(ylo)), 10 ** math.ceil(math.log10(yhi))
        else:
            self.ylo, self.yhi = 0.0, yhi * 1.1 if yhi > 0 else 1.0
        self.title, self.ylabel, self.xs = title, ylabel, xs

    def px(self, v):
        return self.x + (math.log2(v) - self.xlo) / (self.xhi - self.xlo) * self.w

    def py(self, v):
        if self.ylog:
            f = (math.log10(max(v, self.ylo)) - math.log10(self.ylo)) / (math.log10(self.yhi) - math.log10(self.ylo))
        else:
            f = (v - self.ylo) / (self.yhi - self.ylo)
        return self.y + self.h - f * self.h

    def frame(self):
        s = [f'<rect x="{self.x}" y="{self.y}" width="{self.w}" height="{self.h}" fill="none" stroke="#444"/>',
             f'<text x="{self.x + self.w / 2}" y="{self.y - 8}" text-anchor="middle" font-size="13">{self.title}</text>',
             f'<text x="{self.x - 44}" y="{self.y + self.h / 2}" font-size="11" transform="rotate(-90 {self.x - 44} {self.y + self.h / 2})" text-anchor="middle">{self.ylabel}</text>']
        for c in self.xs:
            X = self.px(c)
            s.append(f'<line x1="{X}" y1="{self.y + self.h}" x2="{X}" y2="{self.y + self.h + 4}" stroke="#444"/>')
            s.append(f'<text x="{X}" y="{self.y + self.h + 16}" font-size="10" text-anchor="middle">{c}</text>')
        for t in nice_ticks(self.ylo, self.yhi, self.ylog):
            Y = self.py(t)
            s.append(f'<line x1="{self.x}" y1="{Y}" x2="{self.x + self.w}" y2="{Y}" stroke="#ddd"/>')
            label = f"{t:g}"
            s.append(f'<text x="{self.x - 4}" y="{Y + 3}" font-size="10" text-anchor="end">{label}</text>')
        s.append(f'<text x="{self.x + self.w / 2}" y="{self.y + self.h + 30}" font-size="11" text-anchor="middle">clients (closed loop)</text>')
        return s

    def line(self, pts, colour, dash=""):
        if not pts:
            return []
        d = " ".join(f"{self.px(a):.1f},{self.py(b):.1f}" for a, b in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        out = [f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.8"{extra}/>']
        out += [f'<circle cx="{self.px(a):.1f}" cy="{self.py(b):.1f}" r="2.5" fill="{colour}"/>' for a, b in pts]
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bench_json")
    ap.add_argument("--out-dir", default=".")
    args = ap.parse_args()
    doc = json.load(open(args.bench_json))
    open_loop = [c for c in doc.get("curves", []) if c.get("rate_qps", 0) > 0]
    curves = [c for c in doc.get("curves", []) if c.get("rate_qps", 0) <= 0]
    models = list(dict.fromkeys(c["model"] for c in curves))
    policies = list(dict.fromkeys(c["policy"] for c in curves))
    W, PW, PH = 980, 400, 220
    H = 70 + len(models) * (PH + 80)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">tandem recsys: latency vs load on '
           f'{doc.get("system", {}).get("cpu", "CPU")} (solid p99, dashed p50)</text>']
    lx = 60
    for p in policies:
        svg.append(f'<rect x="{lx}" y="34" width="14" height="4" fill="{COLOURS.get(p, "#000")}"/>')
        svg.append(f'<text x="{lx + 18}" y="40" font-size="11">{p}</text>')
        lx += 130
    for i, m in enumerate(models):
        rows = [c for c in curves if c["model"] == m]
        xs = sorted({c["clients"] for c in rows})
        y0 = 80 + i * (PH + 80)
        lat = [c["latency_ms"]["p99"] for c in rows] + [c["latency_ms"]["p50"] for c in rows]
        q = rows[0].get("query_size", "?")
        a = Panel(70, y0, PW, PH, xs, min(lat), max(lat), True, f"{m}: latency (q = {q} rows)", "ms")
        b = Panel(560, y0, PW - 20, PH, xs, 0, max(c["throughput_qps"] for c in rows), False,
                  f"{m}: throughput", "queries/s")
        svg += a.frame() + b.frame()
        for p in policies:
            pr = sorted((c for c in rows if c["policy"] == p), key=lambda c: c["clients"])
            col = COLOURS.get(p, "#000")
            svg += a.line([(c["clients"], c["latency_ms"]["p99"]) for c in pr], col)
            svg += a.line([(c["clients"], c["latency_ms"]["p50"]) for c in pr], col, "4,3")
            svg += b.line([(c["clients"], c["throughput_qps"]) for c in pr], col)
    svg.append("</svg>")
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "recsys_latency_vs_load.svg"), "w") as f:
        f.write("\n".join(svg) + "\n")

    md = ["# tandem recsys benchmark results", "",
          f"Generated by `scripts/recsys/bench_recsys.sh` from `recsys_bench.json` "
          f"(commit {doc.get('build', {}).get('git_commit', doc.get('build', {}).get('commit', '?'))}). "
          "Shared 2-vCPU VM: timings are noisy (see the dependencies spec); compare policies within one run.", ""]
    mach = doc.get("machine")
    if mach:
        md += ["## Machine (measured in the same run)", "",
               f"- STREAM-like triad: {mach['triad_bytes_per_s'] / 1e9:.2f} GB/s",
               f"- FMA peak: {mach['fma_peak_flops_1t'] / 1e9:.1f} GFLOP/s on 1 thread, "
               f"{mach['fma_peak_flops'] / 1e9:.1f} GFLOP/s on all threads", ""]
    if doc.get("embedding"):
        md += ["## Embedding lookups (pooled, uniform random rows, dim 64, 1024 bags x 80 ids)", "",
               "| dtype | threads | table MiB | GB/s (row bytes read) | % of triad | Mlookups/s |", "|---|---|---|---|---|---|"]
        for e in doc["embedding"]:
            pct = 100 * e["gb_per_s"] * 1e9 / mach["triad_bytes_per_s"] if mach else float("nan")
            md.append(f"| {e['dtype']} | {e['threads']} | {e['table_bytes'] / 2**20:.0f} | {e['gb_per_s']:.2f} | {pct:.0f}% | {e['lookups_per_s'] / 1e6:.1f} |")
        md.append("")
    if doc.get("mlp"):
        md += ["## MLP layers (ops::gemm, f32)", "", "| layer | m x n x k | threads | GFLOP/s | % of FMA peak |", "|---|---|---|---|---|"]
        for e in doc["mlp"]:
            pct = 100 * e["gflop_per_s"] * 1e9 / mach["fma_peak_flops"] if mach else float("nan")
            md.append(f"| {e['layer']} | {e['m']} x {e['n']} x {e['k']} | {e['threads']} | {e['gflop_per_s']:.1f} | {pct:.0f}% |")
        md.append("")
    if curves:
        md += ["## Latency vs load (closed loop)", "", "![latency vs load](recsys_latency_vs_load.svg)", "",
               "| model | policy | clients | QPS | p50 ms | p95 ms | p99 ms | queue mean ms | service mean ms | batch rows |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for c in curves:
            md.append(f"| {c['model']} | {c['policy']} | {c['clients']} | {c['throughput_qps']:.1f} | "
                      f"{c['latency_ms']['p50']:.1f} | {c['latency_ms']['p95']:.1f} | {c['latency_ms']['p99']:.1f} | "
                      f"{c['queue_ms']['mean']:.1f} | {c['service_ms']['mean']:.1f} | {c['mean_batch_rows']:.0f} |")
        md.append("")
    if open_loop:
        md += ["## Open loop (Poisson arrivals)", "",
               "| model | policy | offered QPS | served QPS | p50 ms | p95 ms | p99 ms | queue mean ms |",
               "|---|---|---|---|---|---|---|---|"]
        for c in open_loop:
            md.append(f"| {c['model']} | {c['policy']} | {c['rate_qps']:g} | {c['throughput_qps']:.1f} | "
                      f"{c['latency_ms']['p50']:.1f} | {c['latency_ms']['p95']:.1f} | {c['latency_ms']['p99']:.1f} | "
                      f"{c['queue_ms']['mean']:.1f} |")
        md.append("")
    with open(os.path.join(args.out_dir, "recsys.md"), "w") as f:
        f.write("\n".join(md))
    print(f"wrote {args.out_dir}/recsys_latency_vs_load.svg and recsys.md ({len(curves)} points)")


if __name__ == "__main__":
    main()
