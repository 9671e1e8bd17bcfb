#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Interleaved tandem vs ONNX Runtime latency on a shared machine; writes one JSON object.

On a machine shared with other jobs the load changes within seconds, so one block of tandem runs
followed by one block of ORT runs compares two different machines. This script alternates short
blocks instead: per round, per model and thread count, `tandem bench-cnn --no-ort -o json` and
`bench_ort.py` (the order flips every round), each with `-r` timed runs after a warm-up, and pools
the samples of all rounds. It reports p50 and min per side, their ratios (ORT / tandem: > 1 means
tandem is faster), GFLOP/s at p50 against the FMA peak (the median of the peaks the tandem runs
measured for that thread count: `measure_cpu_fma_peak_flops`, a register-only FMA loop), the
process CPU time per run on both sides (all threads; it leaves out the time spent waiting for a CPU
on a loaded machine, so at 1 thread its ratio compares the kernels' work) and the load average
before and after.

With --spin both sides spin-wait between parallel regions instead (tandem: libgomp's default
wait policy, OMP_WAIT_POLICY unset; ORT: allow_spinning=1, its default): the setting for a
machine the run has to itself.

Each --variant NAME=ENV runs tandem with extra environment variables (e.g.
`direct=TANDEM_CNN_WINOGRAD=0`); the default variant is tandem as built.

Usage: bench_interleaved.py --tandem build/bin/tandem --models-dir build/cnn_models
           [-m resnet50,mobilenet_v2] [-t 1,2] [--rounds 5] [-r 5] [--spin] [--variant NAME=K=V,...]
Needs: pip install onnxruntime numpy (for bench_ort.py)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run_json(cmd, env):
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def summary(samples):
    return {"p50": statistics.median(samples), "min": min(samples), "n": len(samples)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tandem", default="build/bin/tandem")
    ap.add_argument("--models-dir", default="build/cnn_models")
    ap.add_argument("-m", "--models", default="resnet50,mobilenet_v2")
    ap.add_argument("-t", "--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("--spin", action="store_true",
                    help="let both sides spin-wait between parallel regions (tandem: libgomp's "
                         "default wait policy; ORT: allow_spinning=1); default: neither spins")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=VAR=VALUE[,VAR=VALUE]: tandem with these environment variables")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    base_env = dict(os.environ, OMP_WAIT_POLICY="passive")
    if a.spin:
        base_env.pop("OMP_WAIT_POLICY")
    variants = [("default", {})]
    for v in a.variant:
        name, _, rest = v.partition("=")
        extra = dict(kv.split("=", 1) for kv in rest.split(",") if kv)
        variants.append((name, extra))
    models = a.models.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    samples = {}  # (model, threads, side) -> list
    cpu_samples = {}  # the same, process CPU time per run (leaves out waiting for a CPU)
    gflop = {}  # model -> GFLOP per image (tandem's count: 2 x multiply-adds)
    peaks = {}  # threads -> FMA peaks (GFLOP/s) measured by each tandem run
    ort_version = None
    load_before = os.getloadavg()
    for rnd in range(a.rounds):
        for model in models:
            path = os.path.join(a.models_dir, model + ".onnx")
            for t in threads:
                sides = [("ort", None)] + [(name, env) for name, env in variants]
                if rnd % 2:
                    sides.reverse()
                for side, extra in sides:
                    if side == "ort":
                        j = run_json([sys.executable, os.path.join(here, "bench_ort.py"),
                                      "--model", path, "--threads", str(t), "-r",
                                      str(a.repetitions), "--warmup", "1"]
                                     + ([] if a.spin else ["--no-spin"]), base_env)
                        if "error" in j:
                            sys.exit(j["error"])
                        ort_version = j["onnxruntime"]
                        got = j["results"][0]["samples_ms"]
                        cpu = j["results"][0].get("cpu_ms", [])
                    else:
                        j = run_json([a.tandem, "bench-cnn", "-m", path, "-t", str(t), "-r",
                                      str(a.repetitions), "--warmup", "1", "--no-ort", "-o",
                                      "json"], dict(base_env, **extra))
                        got = j["results"][0]["samples_ms"]
                        cpu = j["results"][0].get("cpu_ms", [])
                        gflop[model] = j["results"][0]["gflop"]
                        peaks.setdefault(t, []).append(j["results"][0]["peak_gflop_per_s"])
                    samples.setdefault((model, t, side), []).extend(got)
                    cpu_samples.setdefault((model, t, side), []).extend(cpu)
                    print(f"round {rnd + 1}/{a.rounds} {model} t={t} {side}: "
                          f"p50 {statistics.median(got):.1f} ms", file=sys.stderr)
    out = {"onnxruntime": ort_version, "rounds": a.rounds, "repetitions": a.repetitions,
           "spin_waiting": a.spin,
           "load_average_before": load_before, "load_average_after": os.getloadavg(),
           "variants": {name: env for name, env in variants}, "results": []}
    for model in models:
        for t in threads:
            o = summary(samples[(model, t, "ort")])
            peak = statistics.median(peaks[t])
            rec = {"model": model, "threads": t, "gflop": gflop[model],
                   "fma_peak_gflop_per_s": peak, "onnxruntime_ms": o,
                   "onnxruntime_gflop_per_s_p50": gflop[model] / (o["p50"] * 1e-3)}
            oc = cpu_samples.get((model, t, "ort"), [])
            if oc:
                rec["onnxruntime_cpu_ms"] = summary(oc)
            for name, _ in variants:
                s = summary(samples[(model, t, name)])
                gfs = gflop[model] / (s["p50"] * 1e-3)
                rec[name] = {"tandem_ms": s, "ratio_ort_over_tandem_p50": o["p50"] / s["p50"],
                             "ratio_ort_over_tandem_min": o["min"] / s["min"],
                             "gflop_per_s_p50": gfs, "fraction_of_peak_p50": gfs / peak}
                tc = cpu_samples.get((model, t, name), [])
                if oc and tc:
                    c = summary(tc)
                    rec[name]["tandem_cpu_ms"] = c
                    rec[name]["cpu_ratio_ort_over_tandem_p50"] = rec["onnxruntime_cpu_ms"]["p50"] / c["p50"]
            out["results"].append(rec)
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
