#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Summarises bench/hpipe/w2w.sh's runs: per (L, topology) the min and median makespan (all the run's
# requests), the best and median throughput, bytes through the coordinator and between the workers.
# Usage: w2w_summary.py OUTDIR OUT.json  (prints the markdown table)
import glob
import json
import os
import re
import statistics
import sys


def main():
    d, out_json = sys.argv[1], sys.argv[2]
    runs = {}
    for path in sorted(glob.glob(os.path.join(d, "run-*-L*-r*.json"))):
        topo, L, rep = re.match(r"run-(\w+)-L(\d+)-r(\d+)\.json", os.path.basename(path)).groups()
        j = json.load(open(path))
        n = j["requests"]
        runs.setdefault((int(L), topo), []).append({
            "round": int(rep),
            "makespan_s": j["measured"]["latency_s"],
            "throughput_tokens_per_s": j["measured"]["throughput_tokens_per_s"],
            "coordinator_bytes": j["topology"]["coordinator_bytes"],
            "worker_to_worker_bytes": j["topology"]["worker_to_worker_bytes"],
            "direct_hops": j["topology"]["direct_hops"],
            "bit_exact": j["verify"]["bit_exact"], "outputs": j["verify"]["outputs"],
            "requests": n, "tokens": j["tokens"], "predicted_latency_s": j["predicted"].get("latency_s"),
        })
    rows = []
    print("| L | topology | runs | makespan, min | median | throughput tok/s, best | median "
          "| coordinator bytes / run | worker-to-worker bytes / run | direct hops | bit-exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (L, topo), rs in sorted(runs.items()):
        lat = [r["makespan_s"] for r in rs]
        thr = [r["throughput_tokens_per_s"] for r in rs]
        row = {"L": L, "topology": topo, "runs": rs,
               "makespan_s": {"min": min(lat), "median": statistics.median(lat)},
               "throughput_tokens_per_s": {"best": max(thr), "median": statistics.median(thr)},
               "coordinator_bytes": statistics.median(r["coordinator_bytes"] for r in rs),
               "worker_to_worker_bytes": statistics.median(r["worker_to_worker_bytes"] for r in rs)}
        rows.append(row)
        exact = f'{sum(r["bit_exact"] for r in rs)}/{sum(r["outputs"] for r in rs)}'
        print(f'| {L} | {"hub-and-spoke" if topo == "hub" else "worker-to-worker"} | {len(rs)} '
              f'| {min(lat):.3f} s | {statistics.median(lat):.3f} s | {max(thr):.1f} '
              f'| {statistics.median(thr):.1f} | {row["coordinator_bytes"]:,.0f} '
              f'| {row["worker_to_worker_bytes"]:,.0f} | {rs[0]["direct_hops"]} | {exact} |')
    json.dump({"rows": rows}, open(out_json, "w"), indent=2)


if __name__ == "__main__":
    main()
