#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent reference for tandem's gpt2 architecture on a tiny generated-weight model.

Builds the tiny GPT-2 of tests/llm/model_gpt2_test.cpp from the deterministic weights of
tiny_weights.py (the C++ test regenerates the same bits), writes it as a GGUF with gguf-py's own
GGUFWriter and gguf-py's tensor names for MODEL_ARCH.GPT2 (so tandem is tested on a file it did not
write), and runs a plain numpy float64 GPT-2 forward: learned positions, pre-LayerNorm, fused QKV
with bias (rows Q | K | V), causal attention, tanh-GELU MLP, final LayerNorm, output tied to the
token embedding. Writes the logits of every prompt row and a greedy continuation (KV-cache-free:
each step recomputes the whole sequence).

Usage (a virtual environment is enough):
  python3 -m venv /tmp/engref && /tmp/engref/bin/pip install gguf numpy
  /tmp/engref/bin/python scripts/ref/gpt2_reference.py --out-dir tests/llm/data
"""

import argparse
import importlib.metadata
import json
import os

import gguf
import numpy as np

from tiny_weights import tokens, values

VOCAB, DIM, HEADS, FF, LAYERS, CTX, EPS = 64, 32, 4, 128, 2, 32, 1e-5
PROMPT_LEN, N_NEW = 10, 8


def tensor_specs():
    """(name, shape, scale, offset, dtype) of every tensor, gguf-py names for MODEL_ARCH.GPT2."""
    T = gguf.MODEL_TENSOR
    n = gguf.TENSOR_NAMES

    def nm(t, suffix, bid=None):
        return (n[t].format(bid=bid) if bid is not None else n[t]) + "." + suffix

    specs = [
        (nm(T.TOKEN_EMBD, "weight"), (VOCAB, DIM), 0.5, 0.0, np.float32),
        (nm(T.POS_EMBD, "weight"), (CTX, DIM), 0.2, 0.0, np.float32),
        (nm(T.OUTPUT_NORM, "weight"), (DIM,), 0.2, 1.0, np.float32),
        (nm(T.OUTPUT_NORM, "bias"), (DIM,), 0.1, 0.0, np.float32),
    ]
    for i in range(LAYERS):
        specs += [
            (nm(T.ATTN_NORM, "weight", i), (DIM,), 0.2, 1.0, np.float32),
            (nm(T.ATTN_NORM, "bias", i), (DIM,), 0.1, 0.0, np.float32),
            (nm(T.ATTN_QKV, "weight", i), (3 * DIM, DIM), 0.3, 0.0, np.float16),
            (nm(T.ATTN_QKV, "bias", i), (3 * DIM,), 0.1, 0.0, np.float32),
            (nm(T.ATTN_OUT, "weight", i), (DIM, DIM), 0.2, 0.0, np.float32),
            (nm(T.ATTN_OUT, "bias", i), (DIM,), 0.1, 0.0, np.float32),
            (nm(T.FFN_NORM, "weight", i), (DIM,), 0.2, 1.0, np.float32),
            (nm(T.FFN_NORM, "bias", i), (DIM,), 0.1, 0.0, np.float32),
            (nm(T.FFN_UP, "weight", i), (FF, DIM), 0.3, 0.0, np.float16),
            (nm(T.FFN_UP, "bias", i), (FF,), 0.1, 0.0, np.float32),
            (nm(T.FFN_DOWN, "weight", i), (DIM, FF), 0.15, 0.0, np.float32),
            (nm(T.FFN_DOWN, "bias", i), (DIM,), 0.1, 0.0, np.float32),
        ]
    return specs


def build():
    return {name: values(name, shape, scale, off).astype(dt)
            for name, shape, scale, off, dt in tensor_specs()}


def write_gguf(path, weights):
    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT2]
    w = gguf.GGUFWriter(path, arch)
    w.add_name("tiny-gpt2")
    w.add_context_length(CTX)
    w.add_embedding_length(DIM)
    w.add_feed_forward_length(FF)
    w.add_block_count(LAYERS)
    w.add_head_count(HEADS)
    w.add_layer_norm_eps(EPS)
    for name, _, _, _, _ in tensor_specs():
        w.add_tensor(name, weights[name])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def layer_norm(x, g, b):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + EPS) * g + b


def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def forward(W, ids):
    f = {k: v.astype(np.float64) for k, v in W.items()}
    t, hd = len(ids), DIM // HEADS
    x = f["token_embd.weight"][ids] + f["position_embd.weight"][np.arange(t)]
    mask = np.tril(np.ones((t, t), dtype=bool))
    for i in range(LAYERS):
        p = f"blk.{i}."
        h = layer_norm(x, f[p + "attn_norm.weight"], f[p + "attn_norm.bias"])
        qkv = h @ f[p + "attn_qkv.weight"].T + f[p + "attn_qkv.bias"]
        q, k, v = (qkv[:, j * DIM:(j + 1) * DIM].reshape(t, HEADS, hd) for j in range(3))
        out = np.empty((t, HEADS, hd))
        for hh in range(HEADS):
            s = np.where(mask, q[:, hh] @ k[:, hh].T / np.sqrt(hd), -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            out[:, hh] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, hh]
        x = x + out.reshape(t, DIM) @ f[p + "attn_output.weight"].T + f[p + "attn_output.bias"]
        h = layer_norm(x, f[p + "ffn_norm.weight"], f[p + "ffn_norm.bias"])
        u = gelu(h @ f[p + "ffn_up.weight"].T + f[p + "ffn_up.bias"])
        x = x + u @ f[p + "ffn_down.weight"].T + f[p + "ffn_down.bias"]
    x = layer_norm(x, f["output_norm.weight"], f["output_norm.bias"])
    return x @ f["token_embd.weight"].T  # tied output


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default="tests/llm/data")
    args = ap.parse_args()
    W = build()
    gguf_path = os.path.join(args.out_dir, "gpt2_tiny.gguf")
    write_gguf(gguf_path, W)
    prompt = tokens(PROMPT_LEN, VOCAB)
    logits = forward(W, prompt)
    seq, greedy = list(prompt), []
    for _ in range(N_NEW):
        nxt = int(np.argmax(forward(W, seq)[-1]))
        greedy.append(nxt)
        seq.append(nxt)
    doc = {
        "note": ("Made by scripts/ref/gpt2_reference.py: numpy float64 GPT-2 forward over the "
                 "tiny_weights.py weights (f16 tensors rounded as stored); gpt2_tiny.gguf written "
                 f"by gguf-py {importlib.metadata.version('gguf')} GGUFWriter, numpy "
                 f"{np.__version__}."),
        "config": {"vocab": VOCAB, "dim": DIM, "heads": HEADS, "ff": FF, "layers": LAYERS,
                   "context": CTX, "eps": EPS},
        "prompt_ids": prompt,
        "logits": [[round(float(v), 6) for v in row] for row in logits],
        "greedy_ids": greedy,
    }
    with open(os.path.join(args.out_dir, "gpt2_tiny_reference.json"), "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    print("prompt", prompt, "greedy", greedy, "gguf bytes", os.path.getsize(gguf_path))


if __name__ == "__main__":
    main()
