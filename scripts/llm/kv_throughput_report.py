#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads the logs of scripts/llm/kv_throughput.sh and writes a JSON record and a Markdown table:
per policy the measured KV bytes of one sequence, the batch that fits the fixed budget M, batch
decode tokens/s, total throughput (generated tokens over the whole batched run, prefill included),
both as ratios to the full cache, the KV bytes of the batch and the allocator's peak.
Usage: kv_throughput_report.py RUN_DIR -o OUT.json --md OUT.md"""
import argparse
import json
import pathlib
import re
import sys


def grab(pattern, text, where):
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"kv_throughput_report: '{pattern}' not found in {where}")
    return m.groups()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir")
    ap.add_argument("-o", "--json", required=True)
    ap.add_argument("--md", required=True)
    a = ap.parse_args()
    run = pathlib.Path(a.run_dir)
    batches = [l.split() for l in (run / "batches.txt").read_text().splitlines() if l.strip()]
    rows = []
    for policy, batch in batches:
        name = policy.replace("+", "_")
        single_path = run / "logs" / f"single-{name}.log"
        batch_path = run / "logs" / f"batch-{name}.log"
        single = single_path.read_text()
        btext = batch_path.read_text()
        prompt, gen = grab(r"(\d+) prompt tokens, (\d+) generated", single, single_path)
        (seq_bytes,) = grab(r"KV cache [\d.]+ MiB \((\d+) bytes", single, single_path)
        s_prefill, s_ttft, s_decode = grab(
            r"prefill ([\d.]+) tokens/s .*TTFT ([\d.]+) s, decode ([\d.]+) tokens/s", single,
            single_path)
        b_prompt, b_gen, steps = grab(r"(\d+) prompt tokens, (\d+) generated in (\d+) steps",
                                      btext, batch_path)
        tput, wall = grab(r"batch throughput ([\d.]+) tokens/s \(([\d.]+) s\)", btext, batch_path)
        dec, dec_tok, dec_s = grab(r"batch decode ([\d.]+) tokens/s \((\d+) tokens in ([\d.]+) s\)",
                                   btext, batch_path)
        (kv_all,) = grab(r"KV caches [\d.]+ MiB in all \((\d+) bytes\)", btext, batch_path)
        (peak,) = grab(r"peak tensor memory [\d.]+ MiB \((\d+) bytes\)", btext, batch_path)
        rows.append({
            "policy": policy, "prompt_tokens": int(prompt), "new_tokens": int(gen),
            "kv_bytes_per_sequence": int(seq_bytes), "single_decode_tokens_per_s": float(s_decode),
            "single_prefill_tokens_per_s": float(s_prefill), "batch": int(batch),
            "batch_generated_tokens": int(b_gen), "batch_steps": int(steps),
            "batch_prompt_tokens": int(b_prompt), "batch_wall_s": float(wall),
            "total_tokens_per_s": float(tput),
            "processed_tokens_per_s": (int(b_prompt) + int(b_gen)) / float(wall),
            "decode_tokens_per_s": float(dec), "decode_tokens": int(dec_tok),
            "decode_s": float(dec_s), "batch_kv_bytes": int(kv_all),
            "peak_tensor_bytes": int(peak)})
    full = next(r for r in rows if r["policy"] == "full")
    for r in rows:
        # Every sequence ran to the length limit: the decode phase holds batch x (new - 1) tokens.
        if r["decode_tokens"] != r["batch"] * (r["new_tokens"] - 1):
            sys.exit(f"kv_throughput_report: {r['policy']}: {r['decode_tokens']} decode tokens, "
                     f"expected {r['batch']} x {r['new_tokens'] - 1}")
        r["decode_ratio_vs_full"] = r["decode_tokens_per_s"] / full["decode_tokens_per_s"]
        r["total_ratio_vs_full"] = r["total_tokens_per_s"] / full["total_tokens_per_s"]
        r["processed_ratio_vs_full"] = r["processed_tokens_per_s"] / full["processed_tokens_per_s"]
    budget = full["batch"] * full["kv_bytes_per_sequence"]
    up = [(run / f).read_text().strip() for f in ("uptime-start.txt", "uptime-end.txt")]
    rec = {"model": "SmolLM2-135M-Instruct Q4_1",
           "commands": ["OUT_DIR=/tmp/kv-throughput scripts/llm/kv_throughput.sh build/bin/tandem",
                        "python3 scripts/llm/kv_throughput_report.py /tmp/kv-throughput "
                        "-o docs/results/kv-throughput.json --md /tmp/kv-throughput/table.md"],
           "budget_bytes": budget, "base_sequences": full["batch"], "rows": rows,
           "uptime_start": up[0], "uptime_end": up[1]}
    pathlib.Path(a.json).write_text(json.dumps(rec, indent=2) + "\n")
    mib = 1048576.0
    lines = ["| policy | KV MiB / seq | batch B | decode tok/s (all seqs) | x full | total tok/s | "
             "x full | prompt+new tok/s | x full | KV MiB (batch, end) | peak tensor MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {r['kv_bytes_per_sequence'] / mib:.2f} | {r['batch']} | "
            f"{r['decode_tokens_per_s']:.1f} | {r['decode_ratio_vs_full']:.2f} | "
            f"{r['total_tokens_per_s']:.1f} | {r['total_ratio_vs_full']:.2f} | "
            f"{r['processed_tokens_per_s']:.1f} | {r['processed_ratio_vs_full']:.2f} | "
            f"{r['batch_kv_bytes'] / mib:.2f} | {r['peak_tensor_bytes'] / mib:.2f} |")
    pathlib.Path(a.md).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
