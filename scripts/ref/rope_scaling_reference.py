#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent reference for tandem's llama RoPE scaling on a tiny generated-weight model.

The tiny llama of tests/llm/model_test.cpp's RopeScaling tests (weights from tiny_weights.py, all
f32, so the C++ test rebuilds the same bits) run by a plain numpy float64 LLaMA forward whose RoPE
frequencies follow llama.cpp's definitions (ggml_rope_ext / ggml_rope_yarn_corr_dims):
  base_i  = freq_base^(-2i/n_dims) / rope_freqs[i]            (rope_freqs: llama3 tensor, or 1)
  linear:  f_i = base_i / factor ;  cos/sin scaled by attn_factor
  yarn:    corr dim(n_rot) = n_dims ln(orig_ctx / (2 pi n_rot)) / (2 ln freq_base);
           low = max(0, floor(dim(beta_fast))), high = min(n_dims - 1, ceil(dim(beta_slow)));
           ramp_i = 1 - clip((i - low) / max(0.001, high - low), 0, 1), mix = ext_factor ramp_i;
           f_i = base_i / factor (1 - mix) + base_i mix ;
           cos/sin scaled by attn_factor (1 + 0.1 ln factor)
Each variant's metadata is written into the JSON, and the C++ test copies it into its GGUF.

Usage: /tmp/engref/bin/python scripts/ref/rope_scaling_reference.py -o tests/llm/data/rope_scaling_reference.json
"""

import argparse
import json

import numpy as np

from tiny_weights import tokens, values

VOCAB, DIM, HEADS, KV_HEADS, FF, LAYERS, CTX, EPS, THETA = 64, 64, 4, 2, 96, 2, 4096, 1e-5, 1e4
HD = DIM // HEADS
POSITIONS = [0, 1, 2, 3, 4, 5, 6, 7, 300, 301, 1500, 3000]

VARIANTS = [
    {"name": "none", "metadata": {}},
    {"name": "linear", "metadata": {"llama.rope.scaling.type": "linear",
                                    "llama.rope.scaling.factor": 4.0}},
    {"name": "yarn", "metadata": {"llama.rope.scaling.type": "yarn",
                                  "llama.rope.scaling.factor": 4.0,
                                  "llama.rope.scaling.original_context_length": 1024}},
    {"name": "yarn_custom", "metadata": {"llama.rope.scaling.type": "yarn",
                                         "llama.rope.scaling.factor": 8.0,
                                         "llama.rope.scaling.original_context_length": 2048,
                                         "llama.rope.scaling.yarn_beta_fast": 16.0,
                                         "llama.rope.scaling.yarn_beta_slow": 2.0,
                                         "llama.rope.scaling.attn_factor": 0.8}},
    {"name": "rope_freqs", "metadata": {}, "rope_freqs": True},
]


def weights():
    W = {"token_embd.weight": values("token_embd.weight", (VOCAB, DIM), 0.5),
         "output_norm.weight": values("output_norm.weight", (DIM,), 0.2, 1.0),
         "output.weight": values("output.weight", (VOCAB, DIM), 0.3),
         "rope_freqs.weight": values("rope_freqs.weight", (HD // 2,), 3.0, 4.0)}
    shapes = {"attn_q": (HEADS * HD, DIM, 0.3), "attn_k": (KV_HEADS * HD, DIM, 0.3),
              "attn_v": (KV_HEADS * HD, DIM, 0.3), "attn_output": (DIM, DIM, 0.2),
              "ffn_gate": (FF, DIM, 0.3), "ffn_up": (FF, DIM, 0.3), "ffn_down": (DIM, FF, 0.15)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        W[p + "attn_norm.weight"] = values(p + "attn_norm.weight", (DIM,), 0.2, 1.0)
        W[p + "ffn_norm.weight"] = values(p + "ffn_norm.weight", (DIM,), 0.2, 1.0)
        for n, (r, c, s) in shapes.items():
            W[p + n + ".weight"] = values(p + n + ".weight", (r, c), s)
    return {k: v.astype(np.float64) for k, v in W.items()}


def frequencies(meta, rope_freqs):
    n_dims = HD
    i = np.arange(n_dims // 2, dtype=np.float64)
    base = THETA ** (-2.0 * i / n_dims)
    if rope_freqs is not None:
        base = base / rope_freqs
    kind = meta.get("llama.rope.scaling.type", "none")
    if kind == "none":
        return base, 1.0
    factor = meta["llama.rope.scaling.factor"]
    attn = meta.get("llama.rope.scaling.attn_factor", 1.0)
    if kind == "linear":
        return base / factor, attn
    orig = meta.get("llama.rope.scaling.original_context_length", CTX)
    beta_fast = meta.get("llama.rope.scaling.yarn_beta_fast", 32.0)
    beta_slow = meta.get("llama.rope.scaling.yarn_beta_slow", 1.0)

    def corr_dim(n_rot):
        return n_dims * np.log(orig / (n_rot * 2 * np.pi)) / (2 * np.log(THETA))

    low = max(0.0, np.floor(corr_dim(beta_fast)))
    high = min(n_dims - 1.0, np.ceil(corr_dim(beta_slow)))
    mix = 1.0 - np.clip((i - low) / max(0.001, high - low), 0.0, 1.0)
    return base / factor * (1.0 - mix) + base * mix, attn * (1.0 + 0.1 * np.log(factor))


def rms(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, pos, freqs, mscale):  # interleaved pairs (2i, 2i+1)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * freqs[None, :]
    c, s = (np.cos(ang) * mscale)[:, None, :], (np.sin(ang) * mscale)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = a * s + b * c
    return y


def forward(W, ids, pos, freqs, mscale):
    t, group = len(ids), HEADS // KV_HEADS
    x = W["token_embd.weight"][ids]
    mask = np.asarray(pos)[:, None] >= np.asarray(pos)[None, :]
    for i in range(LAYERS):
        p = f"blk.{i}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(t, HEADS, HD), pos, freqs, mscale)
        k = rope((h @ W[p + "attn_k.weight"].T).reshape(t, KV_HEADS, HD), pos, freqs, mscale)
        v = (h @ W[p + "attn_v.weight"].T).reshape(t, KV_HEADS, HD)
        out = np.empty((t, HEADS, HD))
        for hq in range(HEADS):
            s = np.where(mask, q[:, hq] @ k[:, hq // group].T / np.sqrt(HD), -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, hq] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hq // group]
        x = x + out.reshape(t, DIM) @ W[p + "attn_output.weight"].T
        h = rms(x, W[p + "ffn_norm.weight"])
        g = h @ W[p + "ffn_gate.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * (h @ W[p + "ffn_up.weight"].T)) @ W[p + "ffn_down.weight"].T
    return rms(x, W["output_norm.weight"]) @ W["output.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="tests/llm/data/rope_scaling_reference.json")
    args = ap.parse_args()
    W = weights()
    ids = tokens(len(POSITIONS), VOCAB)
    out = []
    for var in VARIANTS:
        rf = W["rope_freqs.weight"] if var.get("rope_freqs") else None
        freqs, mscale = frequencies(var["metadata"], rf)
        logits = forward(W, ids, POSITIONS, freqs, mscale)
        out.append({**var, "frequencies": [float(f) for f in freqs], "magnitude": float(mscale),
                    "logits": [[round(float(v), 6) for v in row] for row in logits]})
        print(var["name"], np.round(freqs, 5), round(float(mscale), 5))
    doc = {"note": ("Made by scripts/ref/rope_scaling_reference.py: numpy float64 LLaMA forward "
                    "with llama.cpp's RoPE scaling formulas over the tiny_weights.py weights."),
           "config": {"vocab": VOCAB, "dim": DIM, "heads": HEADS, "kv_heads": KV_HEADS, "ff": FF,
                      "layers": LAYERS, "context": CTX, "eps": EPS, "theta": THETA},
           "prompt_ids": ids, "positions": POSITIONS, "variants": out}
    with open(args.output, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")


if __name__ == "__main__":
    main()
