# SPDX-License-Identifier: Apache-2.0
# What the HPipe loopback summaries (w2w_summary.py, workers_summary.py) read from each
# `tandem pipeline run --json` report, and the statistics they print over a cell's runs.
import glob
import json
import os
import re
import statistics


def run_reports(d):
    """(name, L, round, path, report) of every OUTDIR/run-NAME-L<L>-r<round>.json."""
    for path in sorted(glob.glob(os.path.join(d, "run-*-L*-r*.json"))):
        name, L, rep = re.match(r"run-(.+)-L(\d+)-r(\d+)\.json", os.path.basename(path)).groups()
        yield name, int(L), int(rep), path, json.load(open(path))


def run_record(j, **more):
    """The measured figures of one run's JSON report, plus `more`."""
    return {"makespan_s": j["measured"]["latency_s"],
            "throughput_tokens_per_s": j["measured"]["throughput_tokens_per_s"],
            "bit_exact": j["verify"]["bit_exact"], "outputs": j["verify"]["outputs"],
            "tokens": j["tokens"], "direct_hops": j["topology"]["direct_hops"], **more}


def measured(rs):
    """Min / median makespan and best / median throughput over the runs."""
    lat = [r["makespan_s"] for r in rs]
    thr = [r["throughput_tokens_per_s"] for r in rs]
    return {"makespan_s": {"min": min(lat), "median": statistics.median(lat)},
            "throughput_tokens_per_s": {"best": max(thr), "median": statistics.median(thr)}}


def bit_exact(rs):
    """'equal/total' outputs over the runs."""
    return f'{sum(r["bit_exact"] for r in rs)}/{sum(r["outputs"] for r in rs)}'


def md_row(*cells):
    """One markdown table row of the cells."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
