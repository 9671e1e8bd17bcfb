#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Offline trainer of RecStream, the stream-configuration predictor (the recsys spec §2.5;
include/tandem/recsys/recstream.h). Development only, like scripts/recsys/reference.py: numpy,
no other dependency.

  sweep    Randomised zoo variants (DLRM, WnD, DIN, BST; tables, widths, pooling, sequence and
           query sizes drawn at random) under random closed-loop loads (1..64 clients, fixed or
           lognormal query sizes); each (variant, load) is measured in every configuration by
           `tandem rec-tune --features -o json` on a simulated GPU, one JSON line per pair.
  train    Fits the GCN + MLP_z + head regression (MSE on ln p99, plus the same on the p99s
           centred per pair, which weighs the differences between configurations) with Adam,
           and writes the weight file, recording the command that made it.
  fixture  The numpy forward of a weight file on the inputs of a few sweep lines, for the C++
           test (tests/recsys/recstream_test.cpp) that checks recstream_predict against it.

  python3 bench/recsys/recstream_train.py sweep --tandem build/bin/tandem --pairs 120 \
      --out /tmp/recstream-sweep.jsonl
  python3 bench/recsys/recstream_train.py train /tmp/recstream-sweep.jsonl \
      --out configs/recsys/recstream/sim-h100.json
"""
import argparse
import concurrent.futures
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CONFIGS = [f"{s}:{k}" for s in ("stream-pool", "recos") for k in (1, 2, 4, 8, 16)]
NODE_FEATURES, LOAD_FEATURES = 17, 6


# ---- sweep -------------------------------------------------------------------------------------

def mlp(rng, n, lo, hi):
    return [int(rng.integers(lo, hi + 1)) for _ in range(n)]


def variant(rng, i, query_sizes=(16, 32, 64, 128, 256, 512), max_pooling=120):
    """A random model config object of the zoo format (docs/recsys.md); rows per query drawn from
    query_sizes, DLRM's pooling up to max_pooling (the CPU executor's sweep keeps both small: it
    computes every op for real in wall time, and a short window must hold many queries)."""
    kind = ["dlrm", "wnd", "din", "bst"][i % 4]
    dim = int(rng.choice([8, 16, 32, 64, 128]))
    ntab = int(rng.integers(4, 65)) if kind in ("dlrm", "wnd") else int(rng.integers(1, 5))
    rows = int(rng.integers(1000, 50001))
    # Query sizes up to the full-size zoo's 128 rows and beyond (MLPerf's sizes reach 700), and
    # with --query-sizes down to the tiny models' few rows.
    m = {"kind": kind, "embedding_dim": dim,
         "query_size": int(rng.choice(list(query_sizes))),
         "seed": int(rng.integers(1, 1 << 30)), "description": f"recstream training variant {i}"}
    if kind == "dlrm":
        m["pooling"] = int(rng.integers(1, max_pooling + 1))  # up to RM2's 120
        m["dense_features"] = int(rng.integers(8, 513))
        m["interaction"] = str(rng.choice(["dot", "cat"]))
        m["bottom_mlp"] = mlp(rng, int(rng.integers(0, 3)), 16, 512) + [dim]
        m["top_mlp"] = mlp(rng, int(rng.integers(1, 4)), 16, 1024) + [1]
        m["tables"] = [{"rows": rows, "count": ntab}]
    elif kind == "wnd":
        m["pooling"] = 1
        m["dense_features"] = int(rng.integers(8, 513))
        m["bottom_mlp"] = []
        m["top_mlp"] = mlp(rng, int(rng.integers(1, 4)), 32, 1024) + [1]
        m["tables"] = [{"rows": rows, "count": ntab}]
    else:
        m["pooling"] = int(rng.integers(1, 4))
        m["dense_features"] = int(rng.integers(0, 33))
        m["top_mlp"] = mlp(rng, int(rng.integers(1, 4)), 16, 512) + [1]
        m["tables"] = [{"rows": rows, "count": ntab}]
        m["seq_len"] = int(rng.integers(1, 51))
        if kind == "din":
            m["item_tables"] = [{"rows": rows} for _ in range(int(rng.integers(1, 4)))]
            m["attention_mlp"] = mlp(rng, int(rng.integers(1, 3)), 8, 128)
        else:
            heads = int(rng.choice([1, 2, 4, 8]))
            m["item_tables"] = [{"rows": rows, "dim": max(heads, dim // heads * heads)}]
            m["heads"] = heads
            m["ffn_dim"] = int(rng.integers(16, 513))
    return m


def rec_tune(tandem, model, clients, size_dist, duration, seed, weights=None, features=True,
             device="sim:h100", query_size=0, timing_only=True):
    cmd = [tandem, "rec-tune", "--model", model, "--device", device, "--clients", str(clients),
           "--query-size", str(query_size),
           "--size-dist", size_dist, "--duration", str(duration), "--warmup", str(duration / 5),
           "--seed", str(seed), "--table-budget", "16", "-o", "json"]
    if timing_only:  # the same schedule and p99s; ops not computed on the CPU
        cmd.append("--sim-timing-only")
    if features:
        cmd.append("--features")
    if weights:
        cmd += ["--weights", weights]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def sweep(a):
    rng = np.random.default_rng(a.seed)
    done = 0
    if os.path.exists(a.out):
        with open(a.out) as f:
            done = sum(1 for _ in f)
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp, open(a.out, "a") as out:
        for i in range(a.pairs):
            m = variant(rng, i, a.query_sizes, a.max_pooling)
            clients = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
            size_dist = str(rng.choice(["fixed", "lognormal"]))
            if i < done:
                continue  # resumed: the draws above keep the sequence
            if time.time() - start > a.max_seconds:
                print(f"stopped after {i - done} pairs: --max-seconds", file=sys.stderr)
                break
            path = os.path.join(tmp, f"v{i}.json")
            with open(path, "w") as f:
                json.dump(m, f)
            try:
                j = rec_tune(a.tandem, path, clients, size_dist, a.duration, i + 1, device=a.device,
                             timing_only=a.timing_only)
            except subprocess.CalledProcessError as e:
                print(f"pair {i}: rec-tune failed: {e.stderr.strip()[-300:]}", file=sys.stderr)
                continue
            p99 = {c["config"]: c["latency_ms"]["p99"] for c in j["configs"]}
            rec = {"pair": i, "model": m, "clients": clients, "size_dist": size_dist,
                   "device": a.device, "p99_ms": [p99[c] for c in CONFIGS],
                   "features": j["features"]}
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print(f"pair {i}: {m['kind']} clients {clients} oracle {j['oracle']['config']} "
                  f"({time.time() - start:.0f} s)", file=sys.stderr)


# ---- model -------------------------------------------------------------------------------------

def init(rng, h, hz, hh, nc):
    def glorot(i, o):
        return rng.normal(0, math.sqrt(2.0 / (i + o)), (i, o))
    return {"W1": glorot(NODE_FEATURES, h), "b1": np.zeros(h), "W2": glorot(h, h),
            "b2": np.zeros(h), "Wz": glorot(LOAD_FEATURES, hz), "bz": np.zeros(hz),
            "Wh": glorot(2 * h + hz, hh), "bh": np.zeros(hh), "Wo": glorot(hh, nc),
            "bo": np.zeros(nc)}


def forward(p, x, adj, z, cache=False):
    """recstream_predict in numpy: ln p99 (ms) per configuration."""
    ax = adj @ x
    p1 = ax @ p["W1"] + p["b1"]
    h1 = np.maximum(p1, 0)
    ah = adj @ h1
    p2 = ah @ p["W2"] + p["b2"]
    h2 = np.maximum(p2, 0)
    g = np.concatenate([h2.mean(0), h2.max(0)])
    pz = z @ p["Wz"] + p["bz"]
    u = np.maximum(pz, 0)
    t = np.concatenate([g, u])
    ph = t @ p["Wh"] + p["bh"]
    hh = np.maximum(ph, 0)
    y = hh @ p["Wo"] + p["bo"]
    if not cache:
        return y
    return y, dict(ax=ax, p1=p1, h1=h1, ah=ah, p2=p2, h2=h2, pz=pz, t=t, ph=ph, hh=hh)


def backward(p, x, adj, z, c, dy):
    h = p["W2"].shape[0]
    n = x.shape[0]
    gr = {}
    gr["Wo"] = np.outer(c["hh"], dy)
    gr["bo"] = dy
    dph = (p["Wo"] @ dy) * (c["ph"] > 0)
    gr["Wh"] = np.outer(c["t"], dph)
    gr["bh"] = dph
    dt = p["Wh"] @ dph
    dpz = dt[2 * h:] * (c["pz"] > 0)
    gr["Wz"] = np.outer(z, dpz)
    gr["bz"] = dpz
    dh2 = np.tile(dt[:h] / n, (n, 1))
    dh2[c["h2"].argmax(0), np.arange(h)] += dt[h:2 * h]
    dp2 = dh2 * (c["p2"] > 0)
    gr["W2"] = c["ah"].T @ dp2
    gr["b2"] = dp2.sum(0)
    dp1 = (adj.T @ (dp2 @ p["W2"].T)) * (c["p1"] > 0)
    gr["W1"] = c["ax"].T @ dp1
    gr["b1"] = dp1.sum(0)
    return gr


def loss_grad(y, target, lam):
    """MSE on ln p99 plus lam x MSE of the per-pair centred values, and its gradient."""
    d = y - target
    dc = d - d.mean()
    loss = (d ** 2).mean() + lam * (dc ** 2).mean()
    grad = 2 * d / d.size + lam * 2 * (dc - dc.mean()) / d.size
    return loss, grad


def load_records(path):
    recs = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            ft = r["features"]
            recs.append(dict(r=r, x=np.array(ft["x"]), adj=np.array(ft["adj"]),
                             z=np.array(ft["z"]), y=np.log(np.array(r["p99_ms"]))))
    return recs


def fold_normalisation(p, xs, zm, zs, ym, ys):
    """Weights for raw inputs and outputs: X columns scaled by 1/xs (folded into W1's rows), z
    standardised (folded into Wz and bz), y = ym + ys * out (folded into Wo and bo)."""
    q = {k: v.copy() for k, v in p.items()}
    q["W1"] = p["W1"] / xs[:, None]
    q["Wz"] = p["Wz"] / zs[:, None]
    q["bz"] = p["bz"] - (zm / zs) @ p["Wz"]
    q["Wo"] = p["Wo"] * ys
    q["bo"] = p["bo"] * ys + ym
    return q


def train(a):
    recs = load_records(a.sweep)
    rng = np.random.default_rng(a.seed)
    order = rng.permutation(len(recs))
    nval = max(1, int(len(recs) * a.val))
    val = [recs[i] for i in order[:nval]]
    tr = [recs[i] for i in order[nval:]]
    xs = np.maximum(1e-9, np.max([np.abs(r["x"]).max(0) for r in tr], 0))
    zall = np.array([r["z"] for r in tr])
    zm, zs = zall.mean(0), np.maximum(zall.std(0), 1e-3)
    yall = np.concatenate([r["y"] for r in tr])
    ym, ys = yall.mean(), max(yall.std(), 1e-3)

    def norm(r):
        return r["x"] / xs, r["adj"], (r["z"] - zm) / zs, (r["y"] - ym) / ys

    p = init(rng, a.hidden, a.z_hidden, a.head_hidden, len(CONFIGS))
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    step = 0
    for epoch in range(a.epochs):
        total = 0.0
        for b0 in range(0, len(tr), a.batch):
            batch = [tr[i] for i in rng.permutation(len(tr))[b0:b0 + a.batch]]
            acc = {k: np.zeros_like(w) for k, w in p.items()}
            for r in batch:
                x, adj, z, y = norm(r)
                out, c = forward(p, x, adj, z, cache=True)
                loss, dy = loss_grad(out, y, a.centred)
                total += loss
                for k, g in backward(p, x, adj, z, c, dy).items():
                    acc[k] += g / len(batch)
            step += 1
            lr = a.lr * (0.5 * (1 + math.cos(math.pi * epoch / a.epochs)))
            for k in p:
                g = acc[k] + a.weight_decay * p[k]
                m[k] = 0.9 * m[k] + 0.1 * g
                v[k] = 0.999 * v[k] + 0.001 * g * g
                mh = m[k] / (1 - 0.9 ** step)
                vh = v[k] / (1 - 0.999 ** step)
                p[k] -= lr * mh / (np.sqrt(vh) + 1e-8)
        if epoch % max(1, a.epochs // 10) == 0 or epoch == a.epochs - 1:
            print(f"epoch {epoch}: train loss {total / len(tr):.4f}; "
                  f"{summary(fold_normalisation(p, xs, zm, zs, ym, ys), val)}", file=sys.stderr)
    q = fold_normalisation(p, xs, zm, zs, ym, ys)
    doc = {"format": "tandem-recstream", "version": 1, "executor": a.executor,
           "device_class": a.device_class, "configs": CONFIGS, "node_features": NODE_FEATURES,
           "load_features": LOAD_FEATURES}
    for k in ("W1", "b1", "W2", "b2", "Wz", "bz", "Wh", "bh", "Wo", "bo"):
        doc[k] = np.vectorize(lambda f: float(f"{f:.9g}"))(q[k]).tolist()
    doc["command"] = "python3 bench/recsys/recstream_train.py " + " ".join(sys.argv[1:])
    if a.sweep_command:
        doc["sweep_commands"] = a.sweep_command
    doc["training"] = {"pairs": len(tr), "validation_pairs": len(val),
                       "train": summary(q, tr, text=False), "validation": summary(q, val, text=False),
                       "hidden": a.hidden, "z_hidden": a.z_hidden, "head_hidden": a.head_hidden,
                       "epochs": a.epochs, "seed": a.seed, "sweep_device": recs[0]["r"]["device"]}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {a.out}: validation {summary(q, val)}", file=sys.stderr)


def summary(p, recs, text=True):
    """Mean and max regret of the argmin against the measured best, and RMSE of ln p99."""
    reg, se = [], []
    for r in recs:
        y = forward(p, r["x"], r["adj"], r["z"])
        meas = np.exp(r["y"])
        reg.append(meas[int(np.argmin(y))] / meas.min() - 1)
        se.append(((y - r["y"]) ** 2).mean())
    s = {"mean_regret": float(np.mean(reg)), "max_regret": float(np.max(reg)),
         "rmse_ln_p99": float(math.sqrt(np.mean(se)))}
    if not text:
        return s
    return (f"mean regret {100 * s['mean_regret']:.1f}%, max {100 * s['max_regret']:.1f}%, "
            f"RMSE ln p99 {s['rmse_ln_p99']:.3f}")


def load_weights(path):
    with open(path) as f:
        d = json.load(f)
    return {k: np.array(d[k], dtype=np.float64) for k in
            ("W1", "b1", "W2", "b2", "Wz", "bz", "Wh", "bh", "Wo", "bo")}


def fixture(a):
    p = load_weights(a.weights)
    cases = []
    for model, clients in (("tiny-dlrm", 4), ("tiny-din", 32)):
        j = rec_tune(a.tandem, model, clients, "fixed", 0.002, 1)
        ft = j["features"]
        y = forward(p, np.array(ft["x"]), np.array(ft["adj"]), np.array(ft["z"]))
        cases.append({"model": model, "clients": clients, "x": ft["x"], "adj": ft["adj"],
                      "z": ft["z"], "log_p99_ms": y.tolist()})
    with open(a.out, "w") as f:
        json.dump({"weights": a.weights_name, "cases": cases,
                   "command": "python3 bench/recsys/recstream_train.py " +
                   " ".join(sys.argv[1:])}, f)
        f.write("\n")


def evaluate(a):
    """rec-tune with the weights on (model, load) pairs held out of training: one JSON document
    with every run, and a markdown table of the choices and their regret."""
    pairs = [(m, int(c)) for m in a.models.split(",") for c in a.clients.split(",")]

    def one(pair):
        j = rec_tune(a.tandem, pair[0], pair[1], a.size_dist, a.duration, a.seed,
                     weights=a.weights, features=False, device=a.device, query_size=a.query_size,
                     timing_only=a.timing_only)
        r = j["recstream"]
        print(f"{pair[0]} {pair[1]}: oracle {j['oracle']['config']}, RecStream {r['config']} "
              f"regret {100 * r['regret']:.1f}%", file=sys.stderr)
        return j
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        runs = list(pool.map(one, pairs))
    cmd = "python3 bench/recsys/recstream_train.py " + " ".join(sys.argv[1:])
    with open(a.out + ".json", "w") as f:
        json.dump({"command": cmd, "runs": runs}, f, indent=1)
        f.write("\n")
    lines = ["| model | clients | oracle (p99 ms) | default stream-pool:1 | fixed recos:4 | "
             "hill climbing (probes) | RecStream choice | RecStream predicted / measured p99 ms | "
             "RecStream vs default |",
             "|---|---|---|---|---|---|---|---|---|"]
    for j in runs:
        o, d, fx, h, r = (j[k] for k in ("oracle", "default", "fixed", "hill_climbing", "recstream"))
        lines.append(
            f"| {j['params']['model']} | {j['params']['clients']} | {o['config']} ({o['p99_ms']:.3f}) "
            f"| {d['p99_ms']:.3f} ({100 * d['regret']:+.1f}%) | {fx['p99_ms']:.3f} "
            f"({100 * fx['regret']:+.1f}%) | {h['config']} {100 * h['regret']:+.1f}% ({h['probes']}) "
            f"| {r['config']} {100 * r['regret']:+.1f}% | {r['predicted_p99_ms']:.3f} / "
            f"{r['measured_p99_ms']:.3f} | {100 * (r['measured_p99_ms'] / d['p99_ms'] - 1):+.1f}% |")
    reg = [j["recstream"]["regret"] for j in runs]
    hill = [j["hill_climbing"]["regret"] for j in runs]
    dflt = [j["default"]["regret"] for j in runs]
    lines += ["", f"RecStream regret: mean {100 * np.mean(reg):.1f}%, max {100 * np.max(reg):.1f}%, "
              f"within 5% on {sum(r <= 0.05 for r in reg)} of {len(reg)} pairs; hill climbing mean "
              f"{100 * np.mean(hill):.1f}%, max {100 * np.max(hill):.1f}%; default mean "
              f"{100 * np.mean(dflt):.1f}%, max {100 * np.max(dflt):.1f}%.", "", "```", cmd, "```"]
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    plot(runs, a.out + ".svg")


def plot(runs, path):
    """Per held-out model, p99 against clients: the oracle, the default, hill climbing and
    RecStream's choice (svgplot, log y)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "scripts", "lib"))
    from svgplot import Panel, document
    series = {"oracle": "#2ca02c", "default": "#7f7f7f", "hill_climbing": "#1f77b4",
              "recstream": "#d62728"}
    models = sorted({j["params"]["model"] for j in runs})
    w, h = 300, 200
    out = document(60 + len(models) * (w + 90), h + 130, "RecStream vs B5 on held-out pairs "
                   "(p99 ms)", list(series), series)
    for i, m in enumerate(models):
        rs = sorted((j for j in runs if j["params"]["model"] == m),
                    key=lambda j: j["params"]["clients"])
        pts = {k: [(j["params"]["clients"], j[k]["p99_ms" if k != "recstream" else
                                               "measured_p99_ms"]) for j in rs] for k in series}
        vals = [v for p in pts.values() for _, v in p]
        pan = Panel(70 + i * (w + 90), 70, w, h, [j["params"]["clients"] for j in rs],
                    min(vals), max(vals), True, m, "p99 ms")
        out += pan.frame()
        for k, c in series.items():
            out += pan.line(pts[k], c, "4,3" if k == "oracle" else "")
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--tandem", default="build/bin/tandem")
    s.add_argument("--pairs", type=int, default=120)
    s.add_argument("--duration", type=float, default=0.002)
    s.add_argument("--device", default="sim:h100")
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--max-pooling", type=int, default=120, help="largest DLRM pooling drawn")
    s.add_argument("--max-seconds", type=float, default=900, help="stop starting pairs after this")
    s.add_argument("--query-sizes", default="16,32,64,128,256,512",
                   type=lambda v: tuple(int(x) for x in v.split(",")),
                   help="rows per query a variant draws from (comma-separated)")
    s.add_argument("--out", required=True)
    t = sub.add_parser("train")
    t.add_argument("sweep")
    t.add_argument("--out", required=True)
    t.add_argument("--device-class", default="h100")
    t.add_argument("--executor", default="sim", choices=["sim", "cpu"],
                   help="the executor the sweep measured (sim: SimExecutor, cpu: CpuExecutor)")
    t.add_argument("--hidden", type=int, default=64)
    t.add_argument("--z-hidden", type=int, default=32)
    t.add_argument("--head-hidden", type=int, default=64)
    t.add_argument("--epochs", type=int, default=300)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--lr", type=float, default=3e-3)
    t.add_argument("--weight-decay", type=float, default=1e-4)
    t.add_argument("--centred", type=float, default=4.0)
    t.add_argument("--val", type=float, default=0.2)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--sweep-command", action="append", default=[],
                   help="the sweep command(s) that made the sweep file, kept in the weight file")
    f = sub.add_parser("fixture")
    f.add_argument("--tandem", default="build/bin/tandem")
    f.add_argument("--weights", required=True)
    f.add_argument("--weights-name", required=True, help="the weights' path in the repository")
    f.add_argument("--out", required=True)
    e = sub.add_parser("evaluate")
    e.add_argument("--tandem", default="build/bin/tandem")
    e.add_argument("--weights", required=True)
    e.add_argument("--models", default="rm2,wnd,din,bst")
    e.add_argument("--clients", default="16,32,64")
    e.add_argument("--size-dist", default="fixed")
    e.add_argument("--duration", type=float, default=0.003)
    e.add_argument("--device", default="sim:h100")
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--query-size", type=int, default=0, help="rows per query (0: the model's)")
    e.add_argument("--jobs", type=int, default=2, help="rec-tune processes at once")
    for sp in (s, e):
        sp.add_argument("--timing-only", action=argparse.BooleanOptionalAction, default=True,
                        help="rec-tune --sim-timing-only: ops timed, not computed (the same "
                        "schedules and p99s, much faster; --no-timing-only computes them)")
    e.add_argument("--out", required=True, help="path without extension: writes .json and .md")
    a = ap.parse_args()
    {"sweep": sweep, "train": train, "fixture": fixture, "evaluate": evaluate}[a.cmd](a)


if __name__ == "__main__":
    main()
