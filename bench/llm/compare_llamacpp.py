#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tandem vs llama.cpp on one model, the two tools interleaved.

For each round and thread count it runs `tandem bench-llm -o json` (once per --tandem-decode mode)
and `llama-bench -o json` with the same model, threads, prompt length (pp) and generation length
(tg), alternating which tool goes first from round to round, and records the machine's load
(/proc/loadavg) before and after every run. llama-bench runs at its defaults (extra buffer types /
weight repacking on); if that crashes, the crash is recorded and the run is repeated with
`--repack 0` for the rest of the session. Writes bench/results/llm-vs-llamacpp-<date>.json (every
run's full record, commands, load, ratios) and a Markdown table beside it (.md) and on stdout.

  bench/llm/compare_llamacpp.py --llama-bench /path/to/llama.cpp/build/bin/llama-bench \\
      [--tandem build/bin/tandem] [-m MODEL] [-t 1,2] [-p 512] [-n 128] [-r 3] [--rounds 2] \\
      [--tandem-decode int8,f32] [--out docs/results/llm-vs-llamacpp-<date>.json]

Ratios are per round (tandem / llama.cpp measured next to each other), then the mean over rounds.
Build llama.cpp with scripts/llm/build_llamacpp.sh. Only the Python standard library is needed.
Timings are not asserted anywhere; on a shared machine read them beside the recorded load.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

DECODE_TARGET = 1.3  # issue 23: >= 1.3x llama.cpp decode at 1 and 2 threads
PREFILL_TARGET = 0.8
BANDWIDTH_TARGET = 0.7


def default_model():
    cache = os.environ.get("TANDEM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tandem")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(v) for v in f.read().split()[:3]]
    except OSError:
        return None


def run(cmd):
    """Runs cmd; returns (stdout, load before, load after). CalledProcessError on failure."""
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    before = loadavg()
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True)
    return out.stdout, before, loadavg()


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
    ap.add_argument("--rounds", type=int, default=2,
                    help="interleaved rounds (tool order alternates from round to round)")
    ap.add_argument("--tandem-decode", default="int8,f32",
                    help="tandem bench-llm --decode modes to run, comma-separated (int8 is the "
                    "default decode, f32 the reference)")
    ap.add_argument("--llama-args", default="",
                    help="extra llama-bench arguments (default none: llama.cpp's defaults)")
    ap.add_argument("--tandem-args", default="", help="extra tandem bench-llm arguments")
    ap.add_argument("--out", default=None,
                    help="JSON path (default bench/results/llm-vs-llamacpp-<date>.json)")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        sys.exit(f"compare_llamacpp.py: model {a.model} not found (run `tandem inspect` once to fetch it)")
    for exe in (a.tandem, a.llama_bench):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare_llamacpp.py: {exe} is not an executable")
    threads = [int(t) for t in a.threads.split(",")]
    modes = [m for m in a.tandem_decode.split(",") if m]
    llama_args = a.llama_args.split()
    crashes = []  # llama-bench runs that failed at the defaults

    def tandem_run(t, mode):
        cmd = [a.tandem, "bench-llm", "-m", a.model, "-p", str(a.prompt_tokens), "-n", str(a.gen),
               "-t", str(t), "-r", str(a.repetitions), "-o", "json", "--no-progress",
               "--decode", mode] + a.tandem_args.split()
        out, before, after = run(cmd)
        return {"tool": "tandem", "decode": mode, "threads": t, "command": " ".join(cmd),
                "loadavg_before": before, "loadavg_after": after, "record": json.loads(out)}

    def llama_run(t):
        nonlocal llama_args
        cmd = [a.llama_bench, "-m", a.model, "-t", str(t), "-p", str(a.prompt_tokens), "-n",
               str(a.gen), "-r", str(a.repetitions), "-o", "json"] + llama_args
        try:
            out, before, after = run(cmd)
        except subprocess.CalledProcessError as e:
            if "--repack" in llama_args:
                raise
            crashes.append({"command": " ".join(cmd), "returncode": e.returncode})
            print(f"compare_llamacpp.py: llama-bench failed (exit {e.returncode}) at its "
                  "defaults; repeating with --repack 0 from now on", file=sys.stderr)
            llama_args = llama_args + ["--repack", "0"]
            return llama_run(t)
        return {"tool": "llama.cpp", "threads": t, "command": " ".join(cmd),
                "loadavg_before": before, "loadavg_after": after, "records": json.loads(out)}

    runs = []
    for rnd in range(a.rounds):
        for t in threads:
            steps = [("tandem", m) for m in modes] + [("llama.cpp", None)]
            if rnd % 2 == 1:
                steps.reverse()
            for tool, mode in steps:
                r = tandem_run(t, mode) if tool == "tandem" else llama_run(t)
                r["round"] = rnd
                runs.append(r)

    def llama_ts(r, test):
        for rec in r["records"]:
            if test == "pp" and rec["n_prompt"] == a.prompt_tokens and rec["n_gen"] == 0:
                return rec["avg_ts"], rec["stddev_ts"]
            if test == "tg" and rec["n_gen"] == a.gen and rec["n_prompt"] == 0:
                return rec["avg_ts"], rec["stddev_ts"]
        raise SystemExit(f"compare_llamacpp.py: llama-bench gave no {test} record: {r['command']}")

    rows = []  # one per (round, threads, test, tandem mode)
    for rnd in range(a.rounds):
        for t in threads:
            lr = next(r for r in runs if r["tool"] == "llama.cpp" and r["round"] == rnd
                      and r["threads"] == t)
            for mode in modes:
                tr = next(r for r in runs if r["tool"] == "tandem" and r["round"] == rnd
                          and r["threads"] == t and r["decode"] == mode)
                res = tr["record"]["results"]
                for test, key, n in (("pp", "prefill_tokens_per_s", a.prompt_tokens),
                                     ("tg", "decode_tokens_per_s", a.gen)):
                    theirs, theirs_sd = llama_ts(lr, test)
                    rows.append({"round": rnd, "threads": t, "test": f"{test}{n}",
                                 "tandem_decode": mode,
                                 "tandem_tokens_per_s": res[key]["mean"],
                                 "tandem_stddev": res[key]["stddev"],
                                 "tandem_loadavg": tr["loadavg_before"],
                                 "llamacpp_tokens_per_s": theirs, "llamacpp_stddev": theirs_sd,
                                 "llamacpp_loadavg": lr["loadavg_before"],
                                 "ratio": res[key]["mean"] / theirs})
                rows.append({"round": rnd, "threads": t, "test": "decode_bandwidth_share",
                             "tandem_decode": mode, "tandem": res["decode_bandwidth_share"],
                             "decode_bytes_per_token": res["decode_bytes_per_token"],
                             "memory_bandwidth_bytes_per_s": res["memory_bandwidth_bytes_per_s"]})

    summary = []
    for t in threads:
        for mode in modes:
            for test, target in ((f"pp{a.prompt_tokens}", PREFILL_TARGET),
                                 (f"tg{a.gen}", DECODE_TARGET)):
                sel = [r for r in rows if r["threads"] == t and r["tandem_decode"] == mode
                       and r["test"] == test]
                ratio = statistics.mean(r["ratio"] for r in sel)
                summary.append({"threads": t, "test": test, "tandem_decode": mode,
                                "tandem_tokens_per_s": [r["tandem_tokens_per_s"] for r in sel],
                                "llamacpp_tokens_per_s": [r["llamacpp_tokens_per_s"] for r in sel],
                                "ratios": [r["ratio"] for r in sel], "mean_ratio": ratio,
                                "target_ratio": target, "meets_target": ratio >= target})
            sel = [r for r in rows if r["threads"] == t and r["tandem_decode"] == mode
                   and r["test"] == "decode_bandwidth_share"]
            share = statistics.mean(r["tandem"] for r in sel)
            summary.append({"threads": t, "test": "decode_bandwidth_share", "tandem_decode": mode,
                            "shares": [r["tandem"] for r in sel], "mean_share": share,
                            "target_share": BANDWIDTH_TARGET,
                            "meets_target": share >= BANDWIDTH_TARGET})

    date = datetime.datetime.now(datetime.timezone.utc)
    out = a.out or os.path.join("bench", "results", f"llm-vs-llamacpp-{date:%Y%m%d}.json")
    first = next(r for r in runs if r["tool"] == "tandem")["record"]
    first_llama = next(r for r in runs if r["tool"] == "llama.cpp")["records"]
    doc = {
        "schema_version": 2,
        "kind": "llm-vs-llamacpp",
        "date_utc": date.isoformat(timespec="seconds"),
        "model": a.model,
        "params": {"threads": threads, "prompt_tokens": a.prompt_tokens, "gen_tokens": a.gen,
                   "repetitions": a.repetitions, "rounds": a.rounds, "tandem_decode": modes,
                   "llama_args": llama_args},
        "system": first["system"],
        "tandem": {"build": first["build"]},
        "llamacpp": {"commit": llamacpp_commit(a.llama_bench),
                     "build_commit": first_llama[0].get("build_commit") if first_llama else None,
                     "crashes_at_defaults": crashes},
        "reproduce": "python3 bench/llm/compare_llamacpp.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "rows": rows,
        "summary": summary,
    }
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")

    def load(v):
        return f"{v[0]:.2f}" if v else "?"

    lines = ["| round | threads | test | tandem decode | tandem tok/s | load | llama.cpp tok/s | "
             "load | ratio |", "|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["test"] == "decode_bandwidth_share":
            continue
        lines.append(f"| {r['round'] + 1} | {r['threads']} | {r['test']} | {r['tandem_decode']} | "
                     f"{r['tandem_tokens_per_s']:.1f} ± {r['tandem_stddev']:.1f} | "
                     f"{load(r['tandem_loadavg'])} | {r['llamacpp_tokens_per_s']:.1f} ± "
                     f"{r['llamacpp_stddev']:.1f} | {load(r['llamacpp_loadavg'])} | "
                     f"{r['ratio']:.2f}x |")
    lines += ["", "| threads | test | tandem decode | mean ratio (per round) | target |",
              "|---:|---|---|---:|---:|"]
    for s in summary:
        if s["test"] == "decode_bandwidth_share":
            lines.append(f"| {s['threads']} | decode share of bandwidth bound | "
                         f"{s['tandem_decode']} | {100 * s['mean_share']:.1f}% ("
                         + ", ".join(f"{100 * v:.1f}%" for v in s["shares"])
                         + f") | >= {100 * BANDWIDTH_TARGET:.0f}% |")
        else:
            lines.append(f"| {s['threads']} | {s['test']} | {s['tandem_decode']} | "
                         f"{s['mean_ratio']:.2f}x ("
                         + ", ".join(f"{v:.2f}" for v in s["ratios"])
                         + f") | >= {s['target_ratio']:.1f}x |")
    table = "\n".join(lines) + "\n"
    note = (f"llama-bench arguments: {' '.join(llama_args) or '(defaults)'}"
            + (f"; it crashed at its defaults ({len(crashes)}x) and was rerun with --repack 0"
               if crashes else "") + "; load = /proc/loadavg (1 min) before the run\n\n")
    with open(os.path.splitext(out)[0] + ".md", "w") as f:
        commit = doc["llamacpp"]["commit"] or doc["llamacpp"]["build_commit"]
        f.write(f"tandem vs llama.cpp ({commit}), {a.model}, "
                f"{date:%Y-%m-%d %H:%M} UTC\n\n" + note + table)
    print(note + table, end="")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
