#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Markdown tables of the op-level scheduling results from tandem_bench_recsys JSON (issue 20):
# per device and model, p50 / p99 of every policy at each client count, the % reduction of p99 and
# of the mean latency against B1 (fcfs) at the same N, and the throughput speed-up against B1.
#   bench/recsys/recos_table.py bench.json [more.json ...] > table.md
import json
import sys

ORDER = ["fcfs", "stream-pool", "instances", "b4", "recos", "race", "recos+race"]
LABEL = {"fcfs": "B1 fcfs", "stream-pool": "B2 stream-pool", "instances": "B3 instances",
         "b4": "B4 lookup-ahead", "recos": "RecOS", "race": "RACE", "recos+race": "RecOS+RACE"}


def main():
    curves = []
    for path in sys.argv[1:]:
        with open(path) as f:
            curves += json.load(f)["curves"]
    pts = {}
    for c in curves:
        if c.get("clients", 0) <= 0:
            continue
        pts[(c.get("device", "cpu"), c["model"], c["policy"], c["clients"])] = c
    devices = sorted({k[0] for k in pts}, key=lambda d: (d == "cpu", d))
    for dev in devices:
        models = sorted({k[1] for k in pts if k[0] == dev})
        for m in models:
            pols = [p for p in ORDER if any(k[0] == dev and k[1] == m and k[2] == p for k in pts)]
            ns = sorted({k[3] for k in pts if k[0] == dev and k[1] == m})
            print(f"\n### {m} on {dev}: p50 / p99 ms (p99 change vs B1)\n")
            print("| clients | " + " | ".join(LABEL[p] for p in pols) + " |")
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
            print("| clients | " + " | ".join(LABEL[p] for p in pols if p != "fcfs") + " |")
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
