#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Times ONNX Runtime (CPU execution provider) on ONNX models; writes one JSON object to stdout.

`tandem bench-cnn --ort` runs it in the same process tree, interleaved with tandem's own runs, and
reports the latency ratio. Each model is run with intra_op_num_threads = N (inter-op 1, sequential
execution, graph optimisation level ALL, which enables ORT's NCHWc blocked convolutions and its
Conv+BN+activation fusion) on a fixed-seed normal input.

Usage: bench_ort.py --model M.onnx [--model ...] --threads 1,2 [-r 5] [--warmup 1] [--no-spin]
Needs: pip install onnxruntime numpy
"""
import argparse
import json
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", action="append", required=True)
    ap.add_argument("--threads", default="1")
    ap.add_argument("-r", "--repetitions", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--no-spin", action="store_true",
                    help="threads block instead of spinning (session.intra_op.allow_spinning=0), "
                         "the counterpart of OMP_WAIT_POLICY=passive for tandem")
    a = ap.parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        json.dump({"error": f"onnxruntime unavailable: {e}"}, sys.stdout)
        return 0
    out = {"onnxruntime": ort.__version__, "results": []}
    for path in a.model:
        for threads in [int(t) for t in a.threads.split(",")]:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            if a.no_spin:
                so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            inp = sess.get_inputs()[0]
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in inp.shape]
            x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
            for _ in range(a.warmup):
                sess.run(None, {inp.name: x})
            samples, cpu = [], []
            for _ in range(a.repetitions):
                c0 = time.process_time()
                t0 = time.perf_counter()
                sess.run(None, {inp.name: x})
                samples.append((time.perf_counter() - t0) * 1e3)
                cpu.append((time.process_time() - c0) * 1e3)
            # cpu_ms: CPU time of the process (all its threads) per run; on a machine shared with
            # other jobs it leaves out the time spent waiting for a CPU.
            out["results"].append({"model": path, "threads": threads, "samples_ms": samples,
                                   "cpu_ms": cpu})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
