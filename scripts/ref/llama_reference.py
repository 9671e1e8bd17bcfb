#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent reference for tandem's LLaMA engine: greedy continuations of SmolLM2-135M-Instruct.

A plain numpy implementation of the LLaMA forward (RMSNorm, interleaved-pair RoPE as llama.cpp's
LLAMA_ROPE_TYPE_NORM applies it to GGUF's permuted Q/K weights, GQA attention with a KV cache,
SwiGLU, tied output), reading the real GGUF with the `gguf` package and dequantizing every weight
with gguf.quants.dequantize. Activations are float64. Prompts are fixed token ids taken from
tests/llm/data/tokenizer_smollm2_reference.json (made with HF tokenizers, see that file's note).

Usage (a virtual environment is enough):
  python3 -m venv /tmp/engref && /tmp/engref/bin/pip install gguf numpy
  /tmp/engref/bin/python scripts/ref/llama_reference.py --gguf SmolLM2-135M-Instruct.Q4_1.gguf \
      -o tests/llm/data/smollm2_greedy_reference.json
"""

import argparse
import hashlib
import importlib.metadata
import json

import numpy as np
import gguf
from gguf.quants import dequantize

N_NEW = 16
PROMPTS = [
    {
        "name": "chat_2plus2",
        "text": "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
                "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        "ids": [1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018,
                411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198,
                1, 520, 9531, 198],
    },
    {
        "name": "fox",
        "text": "The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy "
                "dog.",
        "ids": [504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30, 378, 2365, 6354, 16438,
                27003, 690, 260, 23790, 2767, 30],
    },
]


class Llama:
    def __init__(self, path):
        r = gguf.GGUFReader(path)

        def field(key):
            return r.fields[key].contents()

        self.n_layers = int(field("llama.block_count"))
        self.d = int(field("llama.embedding_length"))
        self.n_heads = int(field("llama.attention.head_count"))
        self.n_kv = int(field("llama.attention.head_count_kv"))
        self.eps = float(field("llama.attention.layer_norm_rms_epsilon"))
        self.theta = float(field("llama.rope.freq_base"))
        self.hd = self.d // self.n_heads
        self.rope_dim = int(field("llama.rope.dimension_count"))
        tensors = {t.name: t for t in r.tensors}

        def w(name):
            t = tensors[name]
            return np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64)

        self.embd = w("token_embd.weight")
        self.out_norm = w("output_norm.weight")
        self.out = w("output.weight") if "output.weight" in tensors else self.embd
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                 "ffn_up", "ffn_down"]
        self.layers = [{n: w(f"blk.{i}.{n}.weight") for n in names} for i in range(self.n_layers)]

    def rms(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x, pos):  # x [T, H, D]; pairs (2i, 2i+1) rotate by pos * theta^(-2i/rope_dim)
        half = self.rope_dim // 2
        freq = self.theta ** (-np.arange(half, dtype=np.float64) * 2.0 / self.rope_dim)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * freq[None, :]  # [T, half]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        y = x.copy()
        a, b = x[..., 0:self.rope_dim:2], x[..., 1:self.rope_dim:2]
        y[..., 0:self.rope_dim:2] = a * cos - b * sin
        y[..., 1:self.rope_dim:2] = a * sin + b * cos
        return y

    def forward(self, ids, pos, cache):
        x = self.embd[ids]
        t = len(ids)
        group = self.n_heads // self.n_kv
        for i, L in enumerate(self.layers):
            h = self.rms(x, L["attn_norm"])
            q = self.rope((h @ L["attn_q"].T).reshape(t, self.n_heads, self.hd), pos)
            k = self.rope((h @ L["attn_k"].T).reshape(t, self.n_kv, self.hd), pos)
            v = (h @ L["attn_v"].T).reshape(t, self.n_kv, self.hd)
            ck, cv, cp = cache[i]
            ck = np.concatenate([ck, k]) if ck is not None else k
            cv = np.concatenate([cv, v]) if cv is not None else v
            cp = np.concatenate([cp, np.asarray(pos)]) if cp is not None else np.asarray(pos)
            cache[i] = (ck, cv, cp)
            out = np.empty((t, self.n_heads, self.hd))
            mask = np.asarray(pos)[:, None] >= cp[None, :]  # [T, Tk]
            for hq in range(self.n_heads):
                kh, vh = ck[:, hq // group], cv[:, hq // group]
                s = (q[:, hq] @ kh.T) / np.sqrt(self.hd)
                s = np.where(mask, s, -np.inf)
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                out[:, hq] = (s / s.sum(axis=-1, keepdims=True)) @ vh
            x = x + out.reshape(t, -1) @ L["attn_output"].T
            h = self.rms(x, L["ffn_norm"])
            g = h @ L["ffn_gate"].T
            x = x + ((g / (1.0 + np.exp(-g))) * (h @ L["ffn_up"].T)) @ L["ffn_down"].T
        return self.rms(x[-1:], self.out_norm) @ self.out.T  # [1, V]

    def greedy(self, ids, n):
        cache = [(None, None, None)] * self.n_layers
        logits = self.forward(ids, list(range(len(ids))), cache)[0]
        first = logits
        out = []
        for step in range(n):
            nxt = int(np.argmax(logits))
            out.append(nxt)
            if step + 1 == n:
                break
            p = len(ids) + step
            logits = self.forward([nxt], [p], cache)[0]
        return out, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True)
    ap.add_argument("-o", "--output", default="tests/llm/data/smollm2_greedy_reference.json")
    args = ap.parse_args()
    with open(args.gguf, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    model = Llama(args.gguf)
    results = []
    for p in PROMPTS:
        ids, first = model.greedy(p["ids"], N_NEW)
        top = np.argsort(-first, kind="stable")[:5]
        results.append({"name": p["name"], "text": p["text"], "prompt_ids": p["ids"],
                        "greedy_ids": ids,
                        "top5_ids": [int(i) for i in top],
                        "top5_logits": [float(first[i]) for i in top]})
        print(p["name"], ids, [int(i) for i in top], [round(float(first[i]), 4) for i in top])
    doc = {
        "note": ("Made by scripts/ref/llama_reference.py: a numpy (float64 activations) LLaMA "
                 f"forward over weights read with gguf {importlib.metadata.version('gguf')} "
                 f"(gguf.quants.dequantize), numpy {np.__version__}; prompt ids from "
                 "tokenizer_smollm2_reference.json (HF tokenizers); greedy_ids are the next "
                 f"{N_NEW} argmax tokens with a KV cache; top5 are the logits after the prompt."),
        "gguf_sha256": sha,
        "prompts": results,
    }
    with open(args.output, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
