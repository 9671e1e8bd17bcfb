#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reference dequantization of GGUF K-quant blocks (Q4_K, Q6_K) with gguf-py.

Generates a few super-blocks of each type from fixed-seed random bytes (the f16 scale fields set to
small finite values so every element is finite), dequantizes them with gguf.quants.dequantize
(gguf-py's own implementation of ggml's layouts) and writes the block bytes (hex) and the values to
tests/llm/data/kquant_reference.json for tests/llm/kquant_test.cpp.

Usage: /tmp/engref/bin/python scripts/ref/kquant_reference.py -o tests/llm/data/kquant_reference.json
"""

import argparse
import importlib.metadata
import json

import numpy as np
import gguf
from gguf.quants import dequantize

ROWS, COLS = 2, 512  # two rows of two super-blocks


def blocks(kind, rng):
    n = ROWS * COLS // 256
    if kind == "Q4_K":
        raw = rng.integers(0, 256, size=(n, 144), dtype=np.uint8)
        d = (0.02 + 0.01 * rng.random(n)).astype(np.float16)
        dmin = (0.01 + 0.005 * rng.random(n)).astype(np.float16)
        raw[:, 0:2] = d.view(np.uint8).reshape(n, 2)
        raw[:, 2:4] = dmin.view(np.uint8).reshape(n, 2)
        qtype = gguf.GGMLQuantizationType.Q4_K
    else:
        raw = rng.integers(0, 256, size=(n, 210), dtype=np.uint8)
        d = (0.002 + 0.001 * rng.random(n)).astype(np.float16)
        raw[:, 208:210] = d.view(np.uint8).reshape(n, 2)
        qtype = gguf.GGMLQuantizationType.Q6_K
    data = raw.reshape(ROWS, -1)
    values = dequantize(data, qtype).reshape(ROWS, COLS)
    return data, values


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="tests/llm/data/kquant_reference.json")
    args = ap.parse_args()
    rng = np.random.default_rng(20261130)
    out = {"note": ("Made by scripts/ref/kquant_reference.py: random K-quant blocks dequantized by "
                    f"gguf-py {importlib.metadata.version('gguf')} (gguf.quants.dequantize)."),
           "rows": ROWS, "cols": COLS, "types": {}}
    for kind in ("Q4_K", "Q6_K"):
        data, values = blocks(kind, rng)
        out["types"][kind] = {"hex": bytes(data.tobytes()).hex(),
                              "values": [float(v) for v in values.reshape(-1)]}
        print(kind, data.shape, float(np.abs(values).max()))
    with open(args.output, "w") as fh:
        json.dump(out, fh)
        fh.write("\n")


if __name__ == "__main__":
    main()
