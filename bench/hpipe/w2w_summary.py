#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Summarises bench/hpipe/w2w.sh's runs: per (L, topology) the min and median makespan (all the run's
# requests), the best and median throughput, bytes through the coordinator and between the workers.
# Usage: w2w_summary.py OUTDIR OUT.json  (prints the markdown table)
import json
import statistics
import sys

from run_stats import bit_exact, md_row, measured, run_record, run_reports


def main():
    d, out_json = sys.argv[1], sys.argv[2]
    runs = {}
    for topo, L, rep, _, j in run_reports(d):
        runs.setdefault((L, topo), []).append(run_record(
            j, round=rep, requests=j["requests"],
            coordinator_bytes=j["topology"]["coordinator_bytes"],
            worker_to_worker_bytes=j["topology"]["worker_to_worker_bytes"],
            predicted_latency_s=j["predicted"].get("latency_s")))
    rows = []
    print("| L | topology | runs | makespan, min | median | throughput tok/s, best | median "
          "| coordinator bytes / run | worker-to-worker bytes / run | direct hops | bit-exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (L, topo), rs in sorted(runs.items()):
        m = measured(rs)
        row = {"L": L, "topology": topo, "runs": rs, **m,
               "coordinator_bytes": statistics.median(r["coordinator_bytes"] for r in rs),
               "worker_to_worker_bytes": statistics.median(r["worker_to_worker_bytes"] for r in rs)}
        rows.append(row)
        lat, thr = m["makespan_s"], m["throughput_tokens_per_s"]
        print(md_row(L, "hub-and-spoke" if topo == "hub" else "worker-to-worker", len(rs),
                     f'{lat["min"]:.3f} s', f'{lat["median"]:.3f} s', f'{thr["best"]:.1f}',
                     f'{thr["median"]:.1f}', f'{row["coordinator_bytes"]:,.0f}',
                     f'{row["worker_to_worker_bytes"]:,.0f}', rs[0]["direct_hops"], bit_exact(rs)))
    json.dump({"rows": rows}, open(out_json, "w"), indent=2)


if __name__ == "__main__":
    main()
