#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Summarises bench/hpipe/workers.sh's runs: per (L, system) the plan (layer cuts, slices, packets),
# the planner's predicted latency and throughput beside the measured makespan and throughput (min /
# median over the rounds), the error of the median, the load average at each run, and --verify's
# bit-exact count. Usage: workers_summary.py OUTDIR OUT.json  (prints the markdown table)
import json
import os
import sys

from run_stats import bit_exact, md_row, measured, run_record, run_reports


def main():
    d, out_json = sys.argv[1], sys.argv[2]
    runs = {}
    for system, L, rep, path, j in run_reports(d):
        load = float(open(path[:-len(".json")] + ".load").read().split()[0])
        runs.setdefault((L, system), []).append(run_record(j, round=rep, load_1min=load))
    order = ["base", "gpipe", "gp-b", "terapipe", "hpipe"]
    rows = []
    print("| L | system | layer cuts | slices x packets | predicted latency | measured, min | median "
          "| error (median) | predicted tok/s | measured tok/s, median | load (1 min) | bit-exact |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (L, system), rs in sorted(runs.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]))):
        plan = json.load(open(os.path.join(d, f"plan-{system}-L{L}.json")))
        pred = plan["predicted"]
        m = measured(rs)
        lat, thr = m["makespan_s"], m["throughput_tokens_per_s"]
        err = (lat["median"] - pred["latency_s"]) / pred["latency_s"]
        loads = [r["load_1min"] for r in rs]
        row = {"L": L, "system": system, "cuts": plan["cuts"], "slices": len(plan["slices"]),
               "micro_batches": plan["micro_batches"], "batch": plan["batch"],
               "predicted": {"latency_s": pred["latency_s"],
                             "throughput_tokens_per_s": pred["throughput_per_s"]},
               "measured": m, "error_of_median": err,
               "load_1min": {"min": min(loads), "max": max(loads)}, "runs": rs}
        rows.append(row)
        print(md_row(L, system, plan["cuts"], f'{len(plan["slices"])} x {plan["micro_batches"]}',
                     f'{pred["latency_s"]:.3f} s', f'{lat["min"]:.3f} s', f'{lat["median"]:.3f} s',
                     f'{100 * err:+.1f} %', f'{pred["throughput_per_s"]:.1f}',
                     f'{thr["median"]:.1f}', f'{min(loads):.1f}-{max(loads):.1f}', bit_exact(rs)))
    json.dump({"rows": rows}, open(out_json, "w"), indent=2)


if __name__ == "__main__":
    main()
