#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plots `tandem kv-eval --json` records: KL vs KV bytes and needle accuracy vs KV bytes.

  scripts/llm/kv_plot.py RESULT.json [RESULT.json ...] -o docs/results/kv-eviction.png
      [--md docs/results/kv-eviction.md]

One panel pair per context length (the records may hold several contexts or be several files);
one line per eviction policy (or chain) through its budgets and one marker per quantization-only
scheme (its rows have budget "-"), x = measured KV MiB (allocator), y = mean KL(full || policy) per
decode step (log scale) and needle exact-match accuracy. With --md it also writes the
records' markdown tables (one per context; a row measured in several files is taken from the last) to that file, with bits per stored element derived from
the measured bytes (32 x bytes / full-cache bytes x full tokens / kept tokens per head). Needs matplotlib (pip install matplotlib).
"""
import argparse
import json
import math
import sys


def load_rows(paths):
    rows, meta = [], []
    for p in paths:
        with open(p) as f:
            j = json.load(f)
        res = j.get("results", j)
        meta.append({"file": p, "model": res.get("model"), "text": res.get("text"),
                     "haystack": res.get("haystack"), "threads": j.get("threads"),
                     "config": res.get("config")})
        rows.extend(res["rows"])
    # A (context, policy, budget) measured in several files: the last file given wins, so a newer
    # run can be plotted over an older one without duplicate points.
    last = {}
    for r in rows:
        last[(r["context"], r["policy"], r["budget"])] = r
    return list(last.values()), meta


def bits_per_element(r, rows):
    """Bits per stored K/V element from measured bytes, relative to the f32 full cache."""
    full = [f for f in rows if f["context"] == r["context"] and f["policy"] == "full"]
    if not full or not r["kv_bytes_full"] or not r["kv_tokens_per_head"]:
        return math.nan
    return (32.0 * r["kv_bytes"] / r["kv_bytes_full"] * full[0]["kv_tokens_per_head"] /
            r["kv_tokens_per_head"])


def markdown(rows):
    head = ("| ctx | policy | budget | tokens/head | KV MiB | KV % | bits/elem | KL mean | KL max | "
            "top-1 | PPL (full) | attn err | needle | compress ms | TTFT s | decode tok/s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    out = head
    for r in rows:
        err = sum(r["attn_err_layer"]) / max(1, len(r["attn_err_layer"]))
        out += ("| {ctx} | {p} | {b} | {t:.0f} | {mib:.2f} | {pct:.1f} | {bits:.2f} | {kl:.4f} | {klm:.3f} | "
                "{top1:.3f} | {ppl:.2f} ({pplf:.2f}) | {err:.3f} | {nc}/{nt} | {cms:.1f} | "
                "{ttft:.2f} | {tps:.1f} |\n").format(
                    ctx=r["context"], p=r["policy"], b=r["budget"], t=r["kv_tokens_per_head"],
                    mib=r["kv_bytes"] / 1048576.0,
                    pct=100.0 * r["kv_bytes"] / r["kv_bytes_full"] if r["kv_bytes_full"] else 0,
                    bits=bits_per_element(r, rows),
                    kl=r["kl_mean"], klm=r["kl_max"], top1=r["top1"], ppl=r["ppl"],
                    pplf=r["ppl_full"], err=err, nc=r["needle_correct"], nt=r["needle_trials"],
                    cms=r["compress_s"] * 1e3, ttft=r["ttft_s"], tps=r["decode_tok_s"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("-o", "--out", required=True, help="PNG to write")
    ap.add_argument("--md", help="also write the markdown tables here")
    a = ap.parse_args()
    rows, meta = load_rows(a.json)
    if not rows:
        sys.exit("kv_plot.py: no rows in " + ", ".join(a.json))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    contexts = sorted({r["context"] for r in rows})
    fig, axes = plt.subplots(len(contexts), 2, figsize=(12, 4.2 * len(contexts)), squeeze=False)
    policies = sorted({r["policy"] for r in rows if r["policy"] != "full"})
    cmap = plt.get_cmap("tab20")  # more than ten policies: the default cycle would repeat colours
    colour = {p: cmap(k % 20) for k, p in enumerate(policies)}
    for i, ctx in enumerate(contexts):
        cr = [r for r in rows if r["context"] == ctx]
        full = [r for r in cr if r["policy"] == "full"]
        for p in policies:
            pr = sorted((r for r in cr if r["policy"] == p), key=lambda r: r["kv_bytes"])
            x = [r["kv_bytes"] / 1048576.0 for r in pr]
            kl = [max(r["kl_mean"], 1e-6) for r in pr]
            acc = [r["needle_correct"] / r["needle_trials"] if r["needle_trials"] else math.nan
                   for r in pr]
            if all(r["budget"] == "-" for r in pr):  # quantization only: one point per scheme
                axes[i][0].scatter(x, kl, marker="s", s=45, zorder=3, color=colour[p], label=p)
                axes[i][1].scatter(x, acc, marker="s", s=45, zorder=3, color=colour[p], label=p)
            else:
                ls = "--" if "+" in p else "-"
                axes[i][0].plot(x, kl, marker="o", ls=ls, color=colour[p], label=p)
                axes[i][1].plot(x, acc, marker="o", ls=ls, color=colour[p], label=p)
        for r in full:
            mib = r["kv_bytes"] / 1048576.0
            axes[i][0].axvline(mib, color="gray", ls=":", label="full cache")
            if r["needle_trials"]:
                axes[i][1].axhline(r["needle_correct"] / r["needle_trials"], color="gray", ls=":",
                                   label="full cache")
        axes[i][0].set_yscale("log")
        axes[i][0].set_xscale("log")
        axes[i][1].set_xscale("log")
        axes[i][0].set_title(f"context {ctx}: KL(full || policy) per decode step")
        axes[i][1].set_title(f"context {ctx}: passkey exact match")
        for ax in axes[i]:
            ax.set_xlabel("KV cache MiB (allocator, after compression)")
            ax.grid(True, which="both", alpha=0.3)
        axes[i][0].set_ylabel("mean KL (nats)")
        axes[i][1].set_ylabel("accuracy")
        axes[i][1].set_ylim(-0.05, 1.05)
        axes[i][1].legend(fontsize=8)
    model = meta[0]["model"] or ""
    fig.suptitle(f"tandem kv-eval: {model}, KV eviction, quantization and chains")
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    if a.md:
        with open(a.md, "w") as f:
            for ctx in contexts:
                f.write(f"### Context {ctx}\n\n")
                f.write(markdown([r for r in rows if r["context"] == ctx]))
                f.write("\n")
    print("wrote", a.out)


if __name__ == "__main__":
    main()
