#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws `tandem edge compare --json` output: throughput and latency against bandwidth, and ratios.

    python3 bench/edge/plot_compare.py compare.json --svg out.svg --md out.md --title "..."

The SVG has one row per model: replayed frames/s (solid; the cost model's prediction dashed) and
replayed latency, against the medium's bandwidth, one line per system. The markdown gives PICO's
throughput and latency ratios against every other system at every bandwidth, and the cost model's
error against the replay (mean and largest |error| of period and latency). Standard library only.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib"))
from svgplot import Panel, document  # noqa: E402

COLOURS = {"pico": "#d62728", "lw": "#7f7f7f", "efl": "#2ca02c", "ofl": "#1f77b4",
           "pipeedge": "#9467bd", "single": "#000000", "deepzoning": "#ff7f0e",
           "deepzoning-tp": "#e377c2", "coedge": "#8c564b"}


def svg(rows, title):
    models = list(dict.fromkeys(r["model"] for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    W, PW, PH = 980, 400, 220
    out = document(W, 70 + len(models) * (PH + 80), title, systems, COLOURS, 100)
    for i, m in enumerate(models):
        mr = [r for r in rows if r["model"] == m]
        xs = sorted({r["mbps"] for r in mr})
        y0 = 80 + i * (PH + 80)
        fps = [v for r in mr for v in (r["replayed"]["throughput_fps"], r["predicted"]["throughput_fps"]) if v]
        lat = [r["replayed"]["latency_s"] for r in mr if r["replayed"]["latency_s"]]
        a = Panel(70, y0, PW, PH, xs, min(fps), max(fps), True,
                  f"{m}: frames/s (replayed; dashed: predicted)", "frames/s", "medium Mbit/s")
        b = Panel(560, y0, PW - 20, PH, xs, min(lat), max(lat), True, f"{m}: latency (replayed)", "s",
                  "medium Mbit/s")
        out += a.frame() + b.frame()
        for s in systems:
            sr = sorted((r for r in mr if r["system"] == s), key=lambda r: r["mbps"])
            col = COLOURS.get(s, "#000")
            out += a.line([(r["mbps"], r["replayed"]["throughput_fps"]) for r in sr], col)
            out += a.line([(r["mbps"], r["predicted"]["throughput_fps"]) for r in sr], col, "4,3")
            out += b.line([(r["mbps"], r["replayed"]["latency_s"]) for r in sr], col)
    out.append("</svg>")
    return "\n".join(out) + "\n"


def ratios(rows, lead):
    others = [s for s in dict.fromkeys(r["system"] for r in rows) if s != lead]
    md = [f"| model | Mbit/s | {lead} frames/s | " + " | ".join(f"vs {s}" for s in others) +
          f" | {lead} latency s | " + " | ".join(f"vs {s}" for s in others) + " |",
          "|---|---:|---:|" + "---:|" * len(others) + "---:|" + "---:|" * len(others)]
    by = {(r["model"], r["mbps"], r["system"]): r["replayed"] for r in rows}
    for m, b in dict.fromkeys((r["model"], r["mbps"]) for r in rows):
        p = by.get((m, b, lead))
        if not p:
            continue
        tp = [f"{p['throughput_fps'] / by[(m, b, s)]['throughput_fps']:.2f}x" if (m, b, s) in by else "-" for s in others]
        lt = [f"{by[(m, b, s)]['latency_s'] / p['latency_s']:.2f}x" if (m, b, s) in by else "-" for s in others]
        md.append(f"| {m} | {b:g} | {p['throughput_fps']:.2f} | " + " | ".join(tp) +
                  f" | {p['latency_s']:.3f} | " + " | ".join(lt) + " |")
    return md


def errors(rows):
    md = ["| system | rows | period: mean abs error | max | latency: mean abs error | max |", "|---|---:|---:|---:|---:|---:|"]
    for s in dict.fromkeys(r["system"] for r in rows):
        e = [abs(r["period_error_pct"]) for r in rows if r["system"] == s]
        f = [abs(r["latency_error_pct"]) for r in rows if r["system"] == s]
        md.append(f"| {s} | {len(e)} | {sum(e) / len(e):.1f}% | {max(e):.1f}% | {sum(f) / len(f):.1f}% | {max(f):.1f}% |")
    e = [abs(r["period_error_pct"]) for r in rows]
    md.append(f"| all | {len(e)} | {sum(e) / len(e):.1f}% | {max(e):.1f}% | | |")
    return md


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("compare_json")
    ap.add_argument("--svg", required=True)
    ap.add_argument("--md", required=True)
    ap.add_argument("--title", default="tandem edge compare")
    ap.add_argument("--lead", default="pico", help="the system whose ratios the table gives")
    args = ap.parse_args()
    doc = json.load(open(args.compare_json))
    rows = doc["rows"]
    with open(args.svg, "w") as f:
        f.write(svg(rows, args.title))
    md = ["Throughput ratio: the lead's replayed frames/s over the other system's (> 1: the lead is "
          "faster); latency ratio: the other's replayed latency over the lead's (> 1: the lead is faster).", ""]
    md += ratios(rows, args.lead) + ["", "Cost model vs replay (the planners' prediction error):", ""] + errors(rows)
    with open(args.md, "w") as f:
        f.write("\n".join(md) + "\n")
    print(f"wrote {args.svg} and {args.md} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
