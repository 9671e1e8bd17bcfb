#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The table of bench/recsys/recstream_online.sh: p99 (ms) per load phase for each fixed stream
configuration and for RecStream online (weights, hill climbing), the best fixed configuration
(lowest worst-phase p99) and the online policies' switches; a JSON summary on the last line.

    python3 bench/recsys/recstream_online_table.py OUT_DIR
"""
import glob
import json
import os
import sys


def load(path):
    with open(path) as f:
        j = json.load(f)
    res = j["results"]
    phases = [(p["clients"], p["duration_s"], p["results"]["latency_ms"]["p99"],
               p["results"]["completed"]) for p in res["phases"]]
    return phases, res.get("scheduler", {}).get("online")


def ms(v):
    return "-" if v is None else f"{v:.3f} ms"


def main(out):
    runs = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        runs[os.path.basename(path)[:-5]] = load(path)
    fixed = {k: v for k, v in runs.items() if k.startswith("fixed-")}
    best = min(fixed, key=lambda k: max(p[2] for p in fixed[k][0]))
    phases = next(iter(runs.values()))[0]
    head = " | ".join(f"{c} clients, {d:g} s" for c, d, _, _ in phases)
    print(f"| run | {head} |")
    print("|---" * (len(phases) + 1) + "|")
    order = ["fixed-stream-pool-1", best, "online-weights", "online-hill"]
    order += [k for k in sorted(fixed) if k not in order]
    summary = {"best_fixed": ":".join(best[len("fixed-"):].rsplit("-", 1))}
    for k in order:
        label = k + (" (default)" if k == "fixed-stream-pool-1" else "") + (" (best fixed)" if k == best else "")
        cells = " | ".join(f"{p[2]:.3f} ({p[3]} q)" for p in runs[k][0])
        print(f"| {label} | {cells} |")
        summary[k] = [p[2] for p in runs[k][0]]
    for k in ("online-weights", "online-hill"):
        on = runs[k][1]
        print(f"\n{k}: {on['mode_reason']}; {len(on['switches'])} switches, "
              f"{on['predictions']} predictions, ends at {on['current']}")
        for s in on["switches"]:
            gain = s["predicted_gain"]
            print(f"  t {s['t_s']:.4f} s {s['from']} -> {s['to']} ({s['reason']}"
                  + (f", predicted gain {gain:.2f}, predicted p99 {s['predicted_to_p99_ms']:.3f} ms" if gain is not None else "")
                  + f"; measured p99 before {ms(s['measured_from_p99_ms'])}, after {ms(s['measured_to_p99_ms'])}; "
                  f"{s['drained']} drained in {1e3 * s['drain_s']:.3f} ms)")
        summary[k + "_switches"] = on["switches"]
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1])
