#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tandem vs llama.cpp on one model, side by side in one run.

Runs `tandem bench-llm -o json` and `llama-bench -o json` with the same model, threads, prompt
length (pp) and generation length (tg), and writes bench/results/llm-vs-llamacpp-<date>.json with
both measurements, the ratios tandem / llama.cpp, and the targets (decode >= 1.0x, prefill >= 0.8x),
plus the same as a Markdown table on stdout and beside the JSON (.md).

  bench/llm/compare_llamacpp.py --llama-bench /work/llama.cpp-src/build-cpu/bin/llama-bench \
      [--tandem build/bin/tandem] [-m MODEL] [-t 1,2] [-p 512] [-n 128] [-r 3]

Build llama.cpp with scripts/llm/build_llamacpp.sh. Only the Python standard library is needed.
Timings are not asserted anywhere; a busy machine gives noisy numbers, so run it on a quiet one.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

DECODE_TARGET = 1.0
PREFILL_TARGET = 0.8


def default_model():
    cache = os.environ.get("TANDEM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tandem")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def run(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout


def llamacpp_commit(llama_bench):
    src = os.path.abspath(os.path.join(os.path.dirname(llama_bench), "..", ".."))
    try:
        return subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tandem", default="build/bin/tandem")
    ap.add_argument("--llama-bench", required=True)
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("-t", "--threads", default="1,2")
    ap.add_argument("-p", "--prompt-tokens", type=int, default=512)
    ap.add_argument("-n", "--gen", type=int, default=128)
    ap.add_argument("-r", "--repetitions", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/llm-vs-llamacpp-<date>.json)")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        sys.exit(f"compare_llamacpp.py: model {a.model} not found (run `tandem inspect` once to fetch it)")
    for exe in (a.tandem, a.llama_bench):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare_llamacpp.py: {exe} is not an executable")
    threads = [int(t) for t in a.threads.split(",")]

    tandem_runs = {}
    for t in threads:
        cmd = [a.tandem, "bench-llm", "-m", a.model, "-p", str(a.prompt_tokens), "-n", str(a.gen),
               "-t", str(t), "-r", str(a.repetitions), "-o", "json", "--no-progress"]
        tandem_runs[t] = {"command": " ".join(cmd), "record": json.loads(run(cmd))}

    lb_cmd = [a.llama_bench, "-m", a.model, "-t", a.threads, "-p", str(a.prompt_tokens), "-n",
              str(a.gen), "-r", str(a.repetitions), "-o", "json"]
    lb_records = json.loads(run(lb_cmd))

    def llama(t, test):
        for rec in lb_records:
            if rec["n_threads"] != t:
                continue
            if test == "pp" and rec["n_prompt"] == a.prompt_tokens and rec["n_gen"] == 0:
                return rec
            if test == "tg" and rec["n_gen"] == a.gen and rec["n_prompt"] == 0:
                return rec
        raise SystemExit(f"compare_llamacpp.py: llama-bench gave no {test} record for {t} threads")

    rows = []
    for t in threads:
        res = tandem_runs[t]["record"]["results"]
        for test, key, n, target in (("pp", "prefill_tokens_per_s", a.prompt_tokens, PREFILL_TARGET),
                                     ("tg", "decode_tokens_per_s", a.gen, DECODE_TARGET)):
            ours = res[key]
            theirs = llama(t, test)
            ratio = ours["mean"] / theirs["avg_ts"]
            rows.append({"threads": t, "test": f"{test}{n}",
                         "tandem_tokens_per_s": ours["mean"], "tandem_stddev": ours["stddev"],
                         "llamacpp_tokens_per_s": theirs["avg_ts"],
                         "llamacpp_stddev": theirs["stddev_ts"], "ratio": ratio,
                         "target_ratio": target, "meets_target": ratio >= target})
        rows.append({"threads": t, "test": "decode_bandwidth_share",
                     "tandem": res["decode_bandwidth_share"],
                     "decode_bytes_per_token": res["decode_bytes_per_token"],
                     "memory_bandwidth_bytes_per_s": res["memory_bandwidth_bytes_per_s"],
                     "target_ratio": 0.7, "meets_target": res["decode_bandwidth_share"] >= 0.7})

    date = datetime.datetime.now(datetime.timezone.utc)
    out = a.out or os.path.join("bench", "results", f"llm-vs-llamacpp-{date:%Y%m%d}.json")
    first = tandem_runs[threads[0]]["record"]
    doc = {
        "schema_version": 1,
        "kind": "llm-vs-llamacpp",
        "date_utc": date.isoformat(timespec="seconds"),
        "model": a.model,
        "params": {"threads": threads, "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen,
                   "repetitions": a.repetitions},
        "system": first["system"],
        "tandem": {"build": first["build"],
                   "commands": [tandem_runs[t]["command"] for t in threads],
                   "records": [tandem_runs[t]["record"] for t in threads]},
        "llamacpp": {"commit": llamacpp_commit(a.llama_bench),
                     "build_commit": lb_records[0].get("build_commit") if lb_records else None,
                     "command": " ".join(lb_cmd), "records": lb_records},
        "reproduce": "python3 bench/llm/compare_llamacpp.py " + " ".join(sys.argv[1:]),
        "ratios": rows,
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    lines = ["| threads | test | tandem tok/s | llama.cpp tok/s | ratio | target |",
             "|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        if r["test"] == "decode_bandwidth_share":
            lines.append(f"| {r['threads']} | decode share of bandwidth bound | "
                         f"{100 * r['tandem']:.1f}% | | | >= 70% |")
        else:
            lines.append(f"| {r['threads']} | {r['test']} | {r['tandem_tokens_per_s']:.1f} "
                         f"± {r['tandem_stddev']:.1f} | {r['llamacpp_tokens_per_s']:.1f} "
                         f"± {r['llamacpp_stddev']:.1f} | {r['ratio']:.2f}x | "
                         f">= {r['target_ratio']:.1f}x |")
    table = "\n".join(lines) + "\n"
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        f.write(f"tandem vs llama.cpp ({doc['llamacpp']['commit']}), {a.model}, "
                f"{date:%Y-%m-%d %H:%M} UTC\n\n" + table)
    print(table, end="")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
