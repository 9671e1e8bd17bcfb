#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""ONNX Runtime's own per-node profile of one model (to set beside `tandem cnn-run --profile`).

Runs the model with SessionOptions.enable_profiling (graph optimisation ALL, intra-op threads N,
sequential), drops the warm-up runs' events, and prints per node of the optimised graph: the
node name, its op type (after ORT's fusions, e.g. FusedConv, NchwcConv), the median kernel time
in ms over the timed runs, plus the total per op type. -o json writes the same as JSON.

Usage: ort_profile.py --model M.onnx [--threads 1] [-r 10] [--warmup 3] [-o md|json]
Needs: pip install onnxruntime numpy
"""
import argparse
import json
import os
import statistics
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--repetitions", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("-o", "--output", choices=["md", "json"], default="md")
    a = ap.parse_args()
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    tmp = tempfile.mkdtemp(prefix="ort_profile_")
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(tmp, "ort")
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    shape = [d if isinstance(d, int) else 1 for d in inp.shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    for _ in range(a.warmup + a.repetitions):
        sess.run(None, {inp.name: x})
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    os.rmdir(tmp)
    runs = [e for e in events if e.get("name") == "model_run"]
    runs.sort(key=lambda e: e["ts"])
    timed = runs[a.warmup:]
    t0 = timed[0]["ts"] if timed else 0
    nodes = {}  # name -> [op, total us, count]
    order = []
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < t0:
            continue
        name = e["name"][: -len("_kernel_time")]
        op = e.get("args", {}).get("op_name", "?")
        if name not in nodes:
            nodes[name] = [op, []]
            order.append(name)
        nodes[name][1].append(e["dur"] / 1000.0)
    run_ms = [r["dur"] / 1000.0 for r in timed]
    # Per node: the median over the timed runs (as `tandem cnn-run --profile`), so a run
    # pre-empted by another job does not inflate every node.
    rows = [{"name": n, "op": nodes[n][0], "ms": statistics.median(nodes[n][1])} for n in order]
    by_op = {}
    for r in rows:
        by_op[r["op"]] = by_op.get(r["op"], 0.0) + r["ms"]
    out = {"onnxruntime": ort.__version__, "model": a.model, "threads": a.threads,
           "run_ms": sorted(run_ms), "by_op_ms": by_op, "nodes": rows}
    if a.output == "json":
        json.dump(out, sys.stdout, indent=1)
        print()
        return 0
    print(f"ORT {ort.__version__} {a.model} t={a.threads}: model_run ms "
          f"min {min(run_ms):.2f} p50 {sorted(run_ms)[len(run_ms) // 2]:.2f}")
    print("| op | ms |\n|---|---|")
    for op, ms in sorted(by_op.items(), key=lambda kv: -kv[1]):
        print(f"| {op} | {ms:.2f} |")
    print("\n| node | op | ms |\n|---|---|---|")
    for r in rows:
        print(f"| {r['name']} | {r['op']} | {r['ms']:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
