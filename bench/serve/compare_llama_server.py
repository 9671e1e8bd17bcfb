#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""`tandem serve` against llama.cpp's `llama-server` under the same load: same GGUF model, threads,
slots and context per slot, both servers up on loopback ports at once (idle while the other is
measured), and for each client count the two measured back to back (interleaved, so drift in the
machine's load hits both), with bench/serve/loadgen.py's closed-loop streaming clients. Prints a
table with the ratios (tandem / llama-server) and writes the JSON. Python stdlib only.

  scripts/llm/build_llamacpp.sh /path/to/llama.cpp   # LLAMA_SERVER=1 also builds llama-server
  python3 bench/serve/compare_llama_server.py --llama-server /path/to/build-cpu/bin/llama-server \
      [--tandem build/bin/tandem] [-m MODEL.gguf] [-t 2] [--clients 1,8,32] [--duration 30] \
      [--out docs/results/serve-vs-llama-server-DATE.json]
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen  # noqa: E402
import servers  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    servers.add_server_args(ap)
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--slots", type=int, default=32, help="parallel sequences of both servers")
    ap.add_argument("--ctx", type=int, default=1024, help="context tokens per sequence")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    with open(args.text, encoding="utf-8", errors="replace") as f:
        words = f.read().split()
    peers = {
        "tandem": ([args.tandem, "serve", "-m", args.model, "--port", "18431", "-t",
                    str(args.threads), "--parallel", str(args.slots), "--ctx", str(args.ctx)],
                   "http://127.0.0.1:18431"),
        # llama-server divides --ctx-size among its slots.
        "llama-server": ([args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port",
                          "18432", "-t", str(args.threads), "--parallel", str(args.slots),
                          "--ctx-size", str(args.ctx * args.slots)],
                         "http://127.0.0.1:18432"),
    }
    procs = {}
    logs = {}
    try:
        for name, (cmd, url) in peers.items():
            logs[name] = open(f"/tmp/compare-{name}.log", "w")
            procs[name] = subprocess.Popen(cmd, stdout=logs[name], stderr=subprocess.STDOUT)
        for name, (cmd, url) in peers.items():
            servers.wait_ready(url, procs[name], "compare: " + name)
        rows = []
        for c in [int(x) for x in args.clients.split(",")]:
            row = {"clients": c}
            for name, (cmd, url) in peers.items():
                run = argparse.Namespace(url=url, duration=args.duration, max_tokens=args.max_tokens,
                                         prompt_words=args.prompt_words, api_key="",
                                         seed=args.seed)
                load = os.getloadavg()[0]
                row[name] = loadgen.run_level(run, words, c)
                row[name]["loadavg_before"] = load
            t, l = row["tandem"], row["llama-server"]
            row["ratio_output_tokens_per_s"] = t["output_tokens_per_s"] / max(
                l["output_tokens_per_s"], 1e-9)
            rows.append(row)
            print(f"{c:3d} clients: tandem {t['output_tokens_per_s']:7.1f} tok/s, TTFT p50 "
                  f"{t['ttft_p50_s'] or 0:.3f} s, ITL p50 {t['itl_p50_s'] or 0:.4f} s | llama-server "
                  f"{l['output_tokens_per_s']:7.1f} tok/s, TTFT p50 {l['ttft_p50_s'] or 0:.3f} s, "
                  f"ITL p50 {l['itl_p50_s'] or 0:.4f} s | ratio {row['ratio_output_tokens_per_s']:.2f}x"
                  f" (errors {t['errors']} / {l['errors']})", flush=True)
    finally:
        for p in procs.values():
            p.terminate()
        for p in procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
    doc = {"schema_version": 1, "bench": "serve_vs_llama_server", "command": " ".join(sys.argv),
           "servers": {k: v[0] for k, v in peers.items()},
           "settings": {"threads": args.threads, "slots": args.slots, "ctx_per_slot": args.ctx,
                        "duration_s": args.duration, "max_tokens": args.max_tokens,
                        "prompt_words": args.prompt_words, "text": os.path.basename(args.text)},
           "system": {"cpus": os.cpu_count()}, "levels": rows}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print("compare: wrote", args.out)


if __name__ == "__main__":
    main()
