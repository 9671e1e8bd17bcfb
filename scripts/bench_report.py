#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Turns the Google Benchmark JSON of tandem_bench_kernels into a tandem result record.

Reads the raw JSON (--benchmark_out) of the main pass and, optionally, of the OpenBLAS pass run with
OPENBLAS_CORETYPE unset; writes bench/results/kernels-<host>-<date>.json with schema_version, build
(from the binary's tandem_build context), system (CPU model, flags, cores, OPENBLAS_* environment),
the ceilings measured in the run, per-benchmark samples and statistics, and the tandem/oneDNN and
tandem/OpenBLAS ratio table; prints the tables as markdown on stdout. Standard library only.

Benchmark names are "<kind>/<case>/t<threads>/<impl>" (bench/bench_common.h).

    scripts/bench_report.py --raw raw.json [--raw-unpinned raw2.json] [--out path.json]
"""

import argparse
import datetime
import json
import math
import os
import platform
import socket
import statistics
import sys

SCHEMA_VERSION = 1
COMPARED_KINDS = ("gemm", "conv3x3")
# Implementations a tandem case is compared with: the same contract (row-major GEMM; NCHW in and out).
PEERS = ("onednn", "openblas")
TARGET_RATIO = 0.9


def parse_name(name):
    """(kind, case, threads, impl) of a benchmark name, or None."""
    if name.endswith("/real_time"):
        name = name[: -len("/real_time")]
    parts = name.split("/")
    if len(parts) != 4 or not parts[2].startswith("t"):
        return None
    try:
        threads = int(parts[2][1:])
    except ValueError:
        return None
    return parts[0], parts[1], threads, parts[3]


def to_ms(value, unit):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    return value * scale[unit]


def percentile(sorted_values, p):
    if not sorted_values:
        return None
    idx = p * (len(sorted_values) - 1)
    lo, hi = math.floor(idx), math.ceil(idx)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (idx - lo)


def stats(values):
    if not values:
        return {"mean": None, "stddev": None, "p50": None, "p99": None, "min": None, "max": None}
    v = sorted(values)
    return {
        "mean": statistics.fmean(v),
        "stddev": statistics.stdev(v) if len(v) > 1 else 0.0,
        "p50": percentile(v, 0.5),
        "p99": percentile(v, 0.99),
        "min": v[0],
        "max": v[-1],
    }


def parse_context_json(context, key):
    raw = context.get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def collect(raw, impl_rename=None):
    """Per-benchmark records from one raw Google Benchmark JSON; with impl_rename, only the renamed
    implementations are kept (under their new names)."""
    records = {}
    for b in raw.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        parsed = parse_name(b.get("run_name", b["name"]))
        if parsed is None:
            continue
        kind, case, threads, impl = parsed
        if impl_rename:
            if impl not in impl_rename:
                continue
            impl = impl_rename[impl]
        key = (kind, case, threads, impl)
        rec = records.setdefault(key, {
            "name": f"{kind}/{case}/t{threads}/{impl}",
            "kind": kind, "case": case, "threads": threads, "impl": impl,
            "samples_ms": [], "gflops": [], "gbytes": [], "peak_share": [], "bw_share": [],
            "iterations": [], "flop_per_iter": None, "byte_per_iter": None, "label": None,
            "error": None, "family_index": b.get("family_index", 0),
        })
        if b.get("error_occurred"):
            rec["error"] = b.get("error_message", "error")
            continue
        rec["samples_ms"].append(to_ms(b["real_time"], b.get("time_unit", "ns")))
        rec["iterations"].append(b.get("iterations"))
        for counter in ("gflops", "gbytes", "peak_share", "bw_share"):
            if counter in b:
                rec[counter].append(b[counter])
        for const in ("flop_per_iter", "byte_per_iter"):
            if const in b:
                rec[const] = b[const]
        if b.get("label"):
            rec["label"] = b["label"]
    return records


def finish(rec):
    s = stats(rec["samples_ms"])
    out = {k: rec[k] for k in ("name", "kind", "case", "threads", "impl", "label", "error")}
    out["params"] = {"flop_per_iter": rec["flop_per_iter"], "byte_per_iter": rec["byte_per_iter"]}
    out["repetitions"] = len(rec["samples_ms"])
    out["iterations"] = rec["iterations"]
    out["samples_ms"] = rec["samples_ms"]
    for k in ("mean", "stddev", "p50", "p99", "min"):
        out[f"{k}_ms"] = s[k]
    for counter, field in (("gflops", "gflop_per_s"), ("gbytes", "gbyte_per_s"),
                           ("peak_share", "fma_peak_share"), ("bw_share", "triad_bandwidth_share")):
        st = stats(rec[counter])
        out[field] = {"mean": st["mean"], "stddev": st["stddev"], "p50": st["p50"],
                      "best": st["max"]} if rec[counter] else None
    return out


def p50(bench, field):
    v = bench.get(field) if bench else None
    return v["p50"] if v else None


def best_of(bench, field):
    """The best (highest) rate over the repetitions: a shared machine only ever slows runs down."""
    v = bench.get(field) if bench else None
    return v["best"] if v else None


def ratio(a, b):
    return a / b if a is not None and b else None


def ratio_table(benchmarks):
    groups = {}
    for b in benchmarks:
        if b["kind"] in COMPARED_KINDS:
            groups.setdefault((b["kind"], b["case"], b["threads"]), {})[b["impl"]] = b
    rows = []
    for (kind, case, threads), impls in groups.items():
        def row_for(pick):
            t = pick(impls.get("tandem"), "gflop_per_s")
            peers = {impl: pick(impls.get(impl), "gflop_per_s") for impl in impls if impl != "tandem"}
            comparable = [peers[p] for p in PEERS if peers.get(p)]
            return t, peers, max(comparable) if comparable else None
        t, peers, best = row_for(best_of)
        t50, peers50, best50 = row_for(p50)
        r = ratio(t, best)
        rows.append({
            "kind": kind, "case": case, "threads": threads,
            "statistic": "best of repetitions",
            "tandem_gflop_per_s": t,
            "peer_gflop_per_s": peers,
            "tandem_over_onednn": ratio(t, peers.get("onednn")),
            "tandem_over_openblas": ratio(t, peers.get("openblas")),
            "tandem_over_openblas_unpinned": ratio(t, peers.get("openblas_unpinned")),
            "tandem_over_best": r,
            "tandem_fma_peak_share": best_of(impls.get("tandem"), "fma_peak_share"),
            "meets_target": (r >= TARGET_RATIO) if r is not None else None,
            "p50": {"tandem_gflop_per_s": t50, "peer_gflop_per_s": peers50,
                    "tandem_over_best": ratio(t50, best50)},
        })
    summary = {}
    for row in rows:
        if row["tandem_over_best"]:
            key = f'{row["kind"]} t{row["threads"]}'
            s = summary.setdefault(key, {"cases": 0, "log_sum": 0.0, "below_target": 0})
            s["cases"] += 1
            s["log_sum"] += math.log(row["tandem_over_best"])
            s["below_target"] += 0 if row["meets_target"] else 1
    for s in summary.values():
        s["geomean_tandem_over_best"] = math.exp(s.pop("log_sum") / s["cases"])
    return rows, summary


def cpuinfo():
    model, flags = platform.processor() or platform.machine(), []
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = value.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = value.split()
    except OSError:
        pass
    return model, flags


def memory_bytes():
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def system_json(context):
    model, flags = cpuinfo()
    env = parse_context_json(context, "env") or {}
    for var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                "TANDEM_NUM_THREADS"):
        env.setdefault(var, os.environ.get(var))
    return {
        "hostname": context.get("host_name") or socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "cpu_model": model,
        "cpu_flags": flags,
        "cores_online": os.cpu_count(),
        "benchmark_num_cpus": context.get("num_cpus"),
        "mhz_per_cpu": context.get("mhz_per_cpu"),
        "caches": context.get("caches"),
        "load_avg": context.get("load_avg"),
        "memory_bytes": memory_bytes(),
        "tandem_cpu": parse_context_json(context, "tandem_cpu"),
        "env": env,
        "gpu": None,
    }


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def pct(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def markdown(result):
    out = []
    c = result["ceilings"] or {}
    env = result["system"]["env"]
    out.append(f'# tandem kernels: {result["system"]["cpu_model"]}, '
               f'{c.get("threads", "?")} threads, {result["created_utc"]}')
    out.append("")
    if c:
        out.append(f'Ceilings (measured in the run): FMA peak {fmt(c.get("fma_peak_1t_flops", 0) / 1e9)} '
                   f'GFLOP/s on 1 thread, {fmt(c.get("fma_peak_nt_flops", 0) / 1e9)} GFLOP/s on '
                   f'{c.get("threads")}; triad {fmt(c.get("triad_1t_bytes_per_s", 0) / 1e9)} GB/s '
                   f'(1 thread), {fmt(c.get("triad_nt_bytes_per_s", 0) / 1e9)} GB/s '
                   f'({c.get("threads")}). OPENBLAS_CORETYPE={env.get("OPENBLAS_CORETYPE") or "(unset)"}, '
                   f'OpenBLAS core {((result.get("peers") or {}).get("openblas") or {}).get("corename")}.')
    rows = result["ratios"]
    if rows:
        unpinned = any(r["peer_gflop_per_s"].get("openblas_unpinned") for r in rows)
        out += ["", "## Compute-bound (GFLOP/s, best of the repetitions)", ""]
        head = ["kind", "case", "thr", "tandem", "oneDNN", "OpenBLAS"]
        head += ["OpenBLAS unpinned"] if unpinned else []
        head += ["oneDNN blocked", "t/oneDNN", "t/OpenBLAS", "t/best", "t % peak"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for r in rows:
            p = r["peer_gflop_per_s"]
            cells = [r["kind"], r["case"], str(r["threads"]), fmt(r["tandem_gflop_per_s"]),
                     fmt(p.get("onednn")), fmt(p.get("openblas"))]
            cells += [fmt(p.get("openblas_unpinned"))] if unpinned else []
            best = fmt(r["tandem_over_best"], 2)
            if r["meets_target"] is False:
                best = f"**{best}**"
            cells += [fmt(p.get("onednn_blocked")), fmt(r["tandem_over_onednn"], 2),
                      fmt(r["tandem_over_openblas"], 2), best, pct(r["tandem_fma_peak_share"])]
            out.append("| " + " | ".join(cells) + " |")
        out += ["", f"| kind, threads | cases | geomean tandem/best | below {TARGET_RATIO}x |",
                "|---|---|---|---|"]
        for key, s in sorted(result["ratio_summary"].items()):
            out.append(f'| {key} | {s["cases"]} | {s["geomean_tandem_over_best"]:.2f} | '
                       f'{s["below_target"]} |')
    single = [b for b in result["benchmarks"] if b["kind"] not in COMPARED_KINDS]
    if single:
        out += ["", "## Memory-bound and attention (tandem, best of the repetitions)", "",
                "| kind | case | thr | GFLOP/s | % FMA peak | GB/s | % triad |",
                "|---|---|---|---|---|---|---|"]
        for b in single:
            out.append(f'| {b["kind"]} | {b["case"]} | {b["threads"]} | '
                       f'{fmt(best_of(b, "gflop_per_s"))} | {pct(best_of(b, "fma_peak_share"))} | '
                       f'{fmt(best_of(b, "gbyte_per_s"))} | '
                       f'{pct(best_of(b, "triad_bandwidth_share"))} |')
    errors = [b for b in result["benchmarks"] if b["error"]]
    if errors:
        out += ["", "## Failed benchmarks", ""]
        out += [f'- {b["name"]}: {b["error"]}' for b in errors]
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True, help="Google Benchmark JSON of the main pass")
    ap.add_argument("--raw-unpinned", help="JSON of the OpenBLAS pass with OPENBLAS_CORETYPE unset")
    ap.add_argument("--out", help="result path (default bench/results/kernels-<host>-<date>.json)")
    ap.add_argument("--wall-s", type=float, help="wall time of the main pass")
    ap.add_argument("--repetitions", type=int)
    ap.add_argument("--min-time", type=float)
    ap.add_argument("--filter")
    args = ap.parse_args(argv)

    try:
        with open(args.raw, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"bench_report.py: cannot read {args.raw}: {e}")
    context = raw.get("context", {})
    records = collect(raw)
    unpinned_env = None
    if args.raw_unpinned:
        with open(args.raw_unpinned, encoding="utf-8") as f:
            raw2 = json.load(f)
        unpinned_env = parse_context_json(raw2.get("context", {}), "env")
        records.update(collect(raw2, {"openblas": "openblas_unpinned"}))
    # Registration order of the main pass (the raw order is randomly interleaved).
    group_order = {}
    for (kind, case, threads, impl), rec in records.items():
        if impl != "openblas_unpinned":
            g = (kind, case, threads)
            group_order[g] = min(group_order.get(g, rec["family_index"]), rec["family_index"])
    impl_order = {"tandem": 0, "onednn": 1, "onednn_blocked": 2, "openblas": 3,
                  "openblas_unpinned": 4}
    benchmarks = [finish(r) for r in records.values()]
    benchmarks.sort(key=lambda b: (b["kind"] not in COMPARED_KINDS,
                                   group_order.get((b["kind"], b["case"], b["threads"]), 1 << 30),
                                   impl_order.get(b["impl"], 9)))
    rows, summary = ratio_table(benchmarks)

    now = datetime.datetime.now(datetime.timezone.utc)
    build = parse_context_json(context, "tandem_build")
    result = {
        "schema_version": SCHEMA_VERSION,
        "kind": "tandem.bench.kernels",
        "created_utc": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "build": build,
        "system": system_json(context),
        "ceilings": parse_context_json(context, "ceilings"),
        "peers": parse_context_json(context, "peers"),
        "run": {
            "binary": context.get("executable"),
            "benchmark_library_build_type": context.get("library_build_type"),
            "repetitions": args.repetitions,
            "min_time_s": args.min_time,
            "filter": args.filter,
            "random_interleaving": True,
            "wall_s": args.wall_s,
            "openblas_unpinned_pass": bool(args.raw_unpinned),
            "openblas_unpinned_env": unpinned_env,
            "timing": "wall clock (UseRealTime); rates are per repetition, statistics over "
                      "repetitions; ratios compare the best repetition of each implementation",
        },
        "target": {"tandem_over_best_peer": TARGET_RATIO, "peers": list(PEERS)},
        "benchmarks": benchmarks,
        "ratios": rows,
        "ratio_summary": summary,
    }
    out = args.out
    if not out:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        host = socket.gethostname().split(".")[0]
        out = os.path.join(root, "bench", "results", f"kernels-{host}-{now:%Y%m%d}.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    sys.stdout.write(markdown(result))
    print(f"bench_report.py: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
