#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Markdown tables of the op-level scheduling results from tandem_bench_recsys JSON (issue 20):
# per device and model, p50 / p99 of every policy at each client count, the % reduction of p99 and
# of the mean latency against B1 (fcfs) at the same N, and the throughput speed-up against B1.
#   bench/recsys/recos_table.py bench.json[:KEY][@POLICIES][+SUFFIX] ... [--merged out.json] > table.md
# KEY reads the bench document under that key of the file (e.g. sim_h100 in docs/results JSON);
# @POLICIES keeps only those policies (comma-separated); +SUFFIX renames every policy of that file
# to policy-SUFFIX (an ablation run beside the default one, e.g. +nofuse). Later files win a point.
# --merged writes the combined curves as one bench document (for scripts/recsys/plot_recsys.py).
import json
import sys

ORDER = ["fcfs", "stream-pool", "instances", "b4", "recos-llf", "recos-nofuse", "recos-exact",
         "recos", "race", "recos+race"]
LABEL = {"fcfs": "B1 fcfs", "stream-pool": "B2 stream-pool", "instances": "B3 instances",
         "b4": "B4 lookup-ahead", "recos-llf": "RecOS least slack (spec rule)",
         "recos-nofuse": "RecOS no fusion", "recos-exact": "RecOS exact-size fusion",
         "recos": "RecOS", "race": "RACE",
         "recos+race": "RecOS+RACE"}


def load(arg):
    suffix = keep = key = None
    if "+" in arg:
        arg, suffix = arg.rsplit("+", 1)
    if "@" in arg:
        arg, keep = arg.rsplit("@", 1)
        keep = set(keep.split(","))
    if ":" in arg:
        arg, key = arg.rsplit(":", 1)
    with open(arg) as f:
        doc = json.load(f)
    curves = (doc[key] if key else doc)["curves"]
    out = []
    for c in curves:
        if keep and c["policy"] not in keep:
            continue
        c = dict(c)
        if suffix:
            c["policy"] = f"{c['policy']}-{suffix}"
        out.append(c)
    return out


def main():
    args = sys.argv[1:]
    merged = None
    if "--merged" in args:
        i = args.index("--merged")
        merged = args[i + 1]
        del args[i:i + 2]
    curves = []
    for a in args:
        curves += load(a)
    pts = {}
    for c in curves:
        if c.get("clients", 0) <= 0:
            continue
        pts[(c.get("device", "cpu"), c["model"], c["policy"], c["clients"])] = c
    if merged:
        with open(merged, "w") as f:
            json.dump({"schema_version": 1, "sources": args, "curves": list(pts.values())}, f,
                      indent=1)
    devices = sorted({k[0] for k in pts}, key=lambda d: (d == "cpu", d))
    for dev in devices:
        models = sorted({k[1] for k in pts if k[0] == dev})
        for m in models:
            pols = [p for p in ORDER if any(k[0] == dev and k[1] == m and k[2] == p for k in pts)]
            pols += sorted({k[2] for k in pts if k[0] == dev and k[1] == m} - set(pols))
            ns = sorted({k[3] for k in pts if k[0] == dev and k[1] == m})
            print(f"\n### {m} on {dev}: p50 / p99 ms (p99 change vs B1)\n")
            print("| clients | " + " | ".join(LABEL.get(p, p) for p in pols) + " |")
            print("|---|" + "---|" * len(pols))
            for n in ns:
                b1 = pts.get((dev, m, "fcfs", n))
                cells = []
                for p in pols:
                    c = pts.get((dev, m, p, n))
                    if not c:
                        cells.append("")
                        continue
                    lat = c["latency_ms"]
                    cell = f"{lat['p50']:.3g} / {lat['p99']:.3g}"
                    if b1 and p != "fcfs" and b1["latency_ms"]["p99"] > 0:
                        cell += f" ({100 * (lat['p99'] / b1['latency_ms']['p99'] - 1):+.0f}%)"
                    cells.append(cell)
                print(f"| {n} | " + " | ".join(cells) + " |")
            print(f"\n{m} on {dev}: mean latency change vs B1, throughput x B1, scheduler µs/op\n")
            print("| clients | " + " | ".join(LABEL.get(p, p) for p in pols if p != "fcfs") + " |")
            print("|---|" + "---|" * (len(pols) - 1))
            for n in ns:
                b1 = pts.get((dev, m, "fcfs", n))
                cells = []
                for p in pols:
                    if p == "fcfs":
                        continue
                    c = pts.get((dev, m, p, n))
                    if not c or not b1:
                        cells.append("")
                        continue
                    mean = 100 * (c["latency_ms"]["mean"] / b1["latency_ms"]["mean"] - 1)
                    x = c["throughput_qps"] / max(b1["throughput_qps"], 1e-9)
                    us = c.get("scheduler", {}).get("sched_us_per_op")
                    cells.append(f"{mean:+.0f}%, {x:.2f}x" + (f", {us:.1f} µs" if us else ""))
                print(f"| {n} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
