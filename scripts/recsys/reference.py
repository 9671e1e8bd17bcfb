#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Independent numpy implementation of tandem's recommendation models (DLRM, Wide&Deep, DIN, BST).

Reads the tiny models of configs/recsys/zoo.json, regenerates their weights with the counter-based
rule of include/tandem/recsys/weights.h, draws fixed inputs with numpy, runs the models in float64
and writes tests/recsys/data/reference.json (inputs and expected scores), which
tests/recsys/reference_test.cpp compares with RecModel::forward.

    python3 scripts/recsys/reference.py [--out tests/recsys/data/reference.json]

Needs only numpy (pip install numpy, or Debian's python3-numpy).
"""
import argparse
import json
import math
import os

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def splitmix64(z):
    """Vectorised over a numpy uint64 array (wrapping arithmetic)."""
    z = (z + np.uint64(GOLDEN)).astype(np.uint64)
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)).astype(np.uint64)
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)).astype(np.uint64)
    return z ^ (z >> np.uint64(31))


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for c in text.encode():
        h ^= c
        h = (h * 0x100000001B3) & M64
    return h


def tensor_seed(model_seed, name):
    return fnv1a64(name) ^ ((model_seed * GOLDEN) & M64)


def generate(shape, model_seed, name, scale, offset=0.0):
    n = int(np.prod(shape)) if shape else 1
    with np.errstate(over="ignore"):
        idx = (np.arange(n, dtype=np.uint64) + np.uint64(tensor_seed(model_seed, name)))
        u = (splitmix64(idx) >> np.uint64(40)).astype(np.float64) / 16777216.0
    vals = (offset + scale * (2.0 * u - 1.0)).astype(np.float32)  # stored as f32, like the C++
    return vals.astype(np.float64).reshape(shape)


def scalar_splitmix(z):
    with np.errstate(over="ignore"):
        return int(splitmix64(np.array([z & M64], dtype=np.uint64))[0])


def hash_id(i, salt, rows):
    return scalar_splitmix((i & M64) ^ salt) % rows


def expand_tables(entries, prefix, dim, pooling):
    out = []
    for e in entries:
        for _ in range(e.get("count", 1)):
            out.append({"name": f"{prefix}.{len(out)}", "rows": e["rows"], "dim": e.get("dim", dim),
                        "pooling": e.get("pooling", pooling), "hash": e.get("hash", False)})
    return out


class Model:
    def __init__(self, name, c):
        self.name, self.c = name, c
        self.kind = c["kind"]
        self.seq = self.kind in ("din", "bst")
        dim, pool = c.get("embedding_dim", 0), c.get("pooling", 1)
        self.dense_n = c.get("dense_features", 0)
        self.tables = expand_tables(c["tables"], "user" if self.seq else "emb", dim, pool)
        self.items = expand_tables(c.get("item_tables", []), "item", dim, 1)
        self.seed = c.get("seed", 1)
        self.mean = c.get("pooling_mode", "sum") == "mean"
        self.L = c.get("seq_len", 0)
        self.di = sum(t["dim"] for t in self.items)
        self.W = {}

    def w(self, name, shape, scale, offset=0.0):
        if name not in self.W:
            self.W[name] = generate(shape, self.seed, name, scale, offset)
        return self.W[name]

    def table(self, t, wide=False):
        name = ("wide." if wide else "") + t["name"]
        d = 1 if wide else t["dim"]
        return self.w(name, (t["rows"], d), 0.1 if wide else 1.0 / math.sqrt(t["dim"]))

    def mlp(self, prefix, x, widths, relu_last):
        for i, out in enumerate(widths):
            fan_in = x.shape[-1]
            s = 1.0 / math.sqrt(fan_in)
            W = self.w(f"{prefix}.{i}.weight", (out, fan_in), s)
            b = self.w(f"{prefix}.{i}.bias", (out,), s)
            x = x @ W.T + b
            if i + 1 < len(widths) or relu_last:
                x = np.maximum(x, 0.0)
        return x

    def rows_of(self, t, ids):
        if t["hash"]:
            salt = fnv1a64("salt:" + t["name"])
            return np.array([hash_id(i, salt, t["rows"]) for i in ids], dtype=np.int64)
        return np.asarray(ids, dtype=np.int64)

    def bags(self, q):
        outs = []
        for k, t in enumerate(self.tables):
            T = self.table(t)
            rows = self.rows_of(t, q["ids"][k])
            off = q["offsets"][k]
            o = np.zeros((q["rows"], t["dim"]))
            for r in range(q["rows"]):
                sel = rows[off[r]:off[r + 1]]
                if len(sel):
                    o[r] = T[sel].sum(axis=0)
                    if self.mean:
                        o[r] /= len(sel)
            outs.append(o)
        return outs

    def items_of(self, ids_per_table):
        parts = []
        for k, t in enumerate(self.items):
            parts.append(self.table(t)[self.rows_of(t, ids_per_table[k])])
        return np.concatenate(parts, axis=-1)

    def forward(self, q):
        n = q["rows"]
        dense = np.asarray(q["dense"], dtype=np.float64).reshape(n, self.dense_n)
        e = self.bags(q)
        c = self.c
        if self.kind in ("dlrm", "wnd"):
            x = self.mlp("bottom", dense, c.get("bottom_mlp", []), True)
            if self.kind == "dlrm" and c.get("interaction") == "dot":
                z = [x] + e
                dots = [np.sum(z[i] * z[j], axis=1, keepdims=True)
                        for i in range(1, len(z)) for j in range(i)]
                top_in = np.concatenate([x] + dots, axis=1)
            else:
                top_in = np.concatenate([x] + e, axis=1)
            logit = self.mlp("top", top_in, c["top_mlp"], False)[:, 0]
            if self.kind == "wnd":
                s = 1.0 / math.sqrt(self.dense_n)
                wide = dense @ self.w("wide.dense.weight", (1, self.dense_n), s)[0]
                wide = wide + self.w("wide.dense.bias", (1,), 0.1)[0]
                for k, t in enumerate(self.tables):
                    Wt = self.table(t, wide=True)[:, 0]
                    rows = self.rows_of(t, q["ids"][k])
                    off = q["offsets"][k]
                    for r in range(n):
                        sel = rows[off[r]:off[r + 1]]
                        if len(sel):
                            v = Wt[sel].sum()
                            wide[r] += v / len(sel) if self.mean else v
                logit = logit + wide
            return 1.0 / (1.0 + np.exp(-logit))
        L, di = self.L, self.di
        cand = self.items_of(q["item_ids"])                                  # [n, di]
        seqs = self.items_of([np.asarray(s) for s in q["seq_ids"]]).reshape(n, L, di)
        front = [dense] + e
        if self.kind == "din":
            cc = np.repeat(cand[:, None, :], L, axis=1)
            feat = np.concatenate([seqs, cc, seqs - cc, seqs * cc], axis=2).reshape(n * L, 4 * di)
            a = self.mlp("att", feat, c["attention_mlp"] + [1], False).reshape(n, L)
            u = np.einsum("nl,nld->nd", a, seqs)
            top_in = np.concatenate(front + [u, cand], axis=1)
        else:
            T, H = L + 1, c["heads"]
            dh = di // H
            X = np.concatenate([seqs, cand[:, None, :]], axis=1)
            X = X + self.w("pos_emb", (T, di), 0.1)
            s = 1.0 / math.sqrt(di)
            qkv = self.mlp("attn.in_proj", X.reshape(n * T, di), [3 * di], False).reshape(n, T, 3 * di)
            Q, K, V = (qkv[..., i * di:(i + 1) * di].reshape(n, T, H, dh) for i in range(3))
            S = np.einsum("nthd,nshd->nhts", Q, K) / math.sqrt(dh)
            S = S - S.max(axis=-1, keepdims=True)
            P = np.exp(S)
            P /= P.sum(axis=-1, keepdims=True)
            O = np.einsum("nhts,nshd->nthd", P, V).reshape(n * T, di)
            Wo = self.w("attn.out_proj.weight", (di, di), s)
            bo = self.w("attn.out_proj.bias", (di,), s)
            A = O @ Wo.T + bo + X.reshape(n * T, di)

            def ln(x, name):
                mu = x.mean(axis=-1, keepdims=True)
                var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
                g = self.w(name + ".weight", (di,), 0.1, 1.0)
                b = self.w(name + ".bias", (di,), 0.1)
                return (x - mu) / np.sqrt(var + 1e-5) * g + b

            H1 = ln(A, "ln1")
            F1 = self.mlp("ffn", H1, [c["ffn_dim"]], True)
            fs = 1.0 / math.sqrt(c["ffn_dim"])
            F2 = F1 @ self.w("ffn.1.weight", (di, c["ffn_dim"]), fs).T + self.w("ffn.1.bias", (di,), fs) + H1
            Y = ln(F2, "ln2").reshape(n, T * di)
            top_in = np.concatenate(front + [Y], axis=1)
        logit = self.mlp("top", top_in, c["top_mlp"], False)[:, 0]
        return 1.0 / (1.0 + np.exp(-logit))


def make_query(m, rng, n):
    q = {"rows": n, "dense": rng.uniform(-1, 1, n * m.dense_n).round(4).tolist(), "ids": [], "offsets": []}
    for t in m.tables:
        counts = rng.integers(0, t["pooling"] + 1, n)  # bags of 0..pooling ids (empty bags too)
        off = np.concatenate([[0], np.cumsum(counts)]).astype(int)
        hi = 10 ** 9 if t["hash"] else t["rows"]
        ids = rng.integers(0, hi, int(off[-1]))
        q["ids"].append(ids.tolist())
        q["offsets"].append(off.tolist())
    if m.seq:
        q["item_ids"] = [rng.integers(0, t["rows"], n).tolist() for t in m.items]
        q["seq_ids"] = [rng.integers(0, t["rows"], n * m.L).tolist() for t in m.items]
    return q


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.normpath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", default=os.path.join(root, "configs", "recsys", "zoo.json"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "recsys", "data", "reference.json"))
    args = ap.parse_args()
    zoo = json.load(open(args.zoo))["models"]
    rng = np.random.default_rng(20261130)
    cases = []
    for name in sorted(zoo):
        if not name.startswith("tiny-"):
            continue
        m = Model(name, zoo[name])
        for n in (1, zoo[name].get("query_size", 4)):
            q = make_query(m, rng, n)
            cases.append({"model": name, "query": q, "scores": m.forward(q).tolist()})
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"generator": "scripts/recsys/reference.py", "numpy": np.__version__,
                   "cases": cases}, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    main()
