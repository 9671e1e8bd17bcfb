#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""How many long-prompt requests run together in the same KV memory: `tandem serve` with the full
cache and with a KV policy (default ClusterAttn at 10% of the prompt) against llama.cpp's
`llama-server`, all four given the same KV bytes (--kv-mib) and the same burst of concurrent
long-prompt completions (prompts cut from the committed Austen text). Python stdlib only.

  python3 bench/serve/kv_capacity.py --llama-server /path/to/llama-server \
      [--tandem build/bin/tandem] [--kv-mib 64] [--clients 32] [--prompt-words 380] \
      [--out docs/results/serve-kv-capacity-DATE.json]

Each server's KV memory:
- tandem: `--kv-dtype f16 --kv-max-mib M` (admission bounds the allocator bytes of the running
  sequences' caches; a KV policy's saving is learned from one warm-up request, sent first).
- llama-server: f16 cache of as many cells as fit in M (bytes per cell read from llama-server's own
  log at start), in its two layouts: one slot per request with a fixed share of the cells
  (`--parallel` = cells / request length, the most that can each hold a whole request), and the
  unified cache (`--kv-unified`, `--parallel` = clients, slots share the cells).
For each: the most requests generating together (polled from /metrics every 50 ms), requests that
completed, errors, the burst's wall time, and the peak KV bytes tandem's /metrics reported.
"""
import argparse
import json
import os
import re
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import servers  # noqa: E402

MIB = 1 << 20


def post(url, body, timeout=900):
    req = urllib.request.Request(url + "/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


def metric(text, name):
    m = re.search(r"^" + re.escape(name) + r"(?:\{[^}]*\})? ([0-9.eE+-]+)$", text, re.M)
    return float(m.group(1)) if m else None


def burst(url, prompts, max_tokens, running_metric, kv_metric):
    """Sends every prompt at once; polls /metrics until all have answered."""
    results = [None] * len(prompts)

    def client(i):
        try:
            r = post(url, {"prompt": prompts[i], "max_tokens": max_tokens, "temperature": 0})
            results[i] = ("ok", r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
        except Exception as e:  # an HTTP error or a dropped connection: counted, not fatal
            body = e.read()[:200].decode("utf-8", "replace") if hasattr(e, "read") else ""
            results[i] = ("error", str(e) + (" " + body if body else ""))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(prompts))]
    t0 = time.time()
    for t in threads:
        t.start()
    most, kv_peak = 0, 0
    while any(t.is_alive() for t in threads):
        try:
            with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
                text = r.read().decode()
            most = max(most, int(metric(text, running_metric) or 0))
            if kv_metric:
                kv_peak = max(kv_peak, int(metric(text, kv_metric) or 0))
        except OSError:
            pass
        time.sleep(0.05)
    wall = time.time() - t0
    ok = [r for r in results if r[0] == "ok"]
    errors = [r[1] for r in results if r[0] == "error"]
    return {"requests": len(prompts), "completed": len(ok), "errors": len(errors),
            "first_error": errors[0] if errors else None,
            "most_running_together": most, "wall_s": round(wall, 2),
            "prompt_tokens": sorted({r[1] for r in ok}), "completion_tokens_total":
            sum(r[2] for r in ok), "peak_kv_bytes": kv_peak or None}


def llama_bytes_per_cell(args, port):
    """Starts llama-server once with 4096 cells and reads its KV size line (-lv 4 logs it)."""
    log = "/tmp/kv-capacity-llama-probe.log"
    proc = servers.start([args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port",
                          str(port), "-t", str(args.threads), "--ctx-size", "4096", "--parallel",
                          "1", "-lv", "4"], "http://127.0.0.1:%d" % port, log)
    servers.stop(proc)
    text = open(log, encoding="utf-8", errors="replace").read()
    m = re.search(r"llama_kv_cache: size =\s*([0-9.]+) MiB \(\s*(\d+) cells", text)
    if not m:
        sys.exit("kv_capacity: no 'llama_kv_cache: size' line in " + log)
    return float(m.group(1)) * MIB / int(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    servers.add_server_args(ap)
    ap.add_argument("--kv-mib", type=float, default=64.0, help="KV memory of every server")
    ap.add_argument("--clients", type=int, default=32, help="requests in the burst")
    ap.add_argument("--prompt-words", type=int, default=380)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--policy", default="clusterattn")
    ap.add_argument("--budget", default="10%")
    ap.add_argument("--out")
    args = ap.parse_args()
    words = open(args.text, encoding="utf-8", errors="replace").read().split()
    stride = 1000
    if len(words) < (args.clients + 2) * stride:
        sys.exit("kv_capacity: %s is too short for %d prompts" % (args.text, args.clients + 1))
    prompts = [" ".join(words[i * stride:i * stride + args.prompt_words])
               for i in range(args.clients)]
    warm = " ".join(words[(args.clients + 1) * stride:(args.clients + 1) * stride
                          + args.prompt_words])
    runs = []

    def tandem_run(label, extra):
        port = 18441 + len(runs)
        cmd = [args.tandem, "serve", "-m", args.model, "--port", str(port), "-t", str(args.threads),
               "--parallel", str(args.clients), "--kv-dtype", "f16", "--kv-max-mib",
               str(args.kv_mib), "--no-progress"] + extra
        url = "http://127.0.0.1:%d" % port
        proc = servers.start(cmd, url, "/tmp/kv-capacity-%d.log" % len(runs))
        try:
            post(url, {"prompt": warm, "max_tokens": args.max_tokens, "temperature": 0})
            r = burst(url, prompts, args.max_tokens, "tandem_running_sequences", "tandem_kv_bytes")
        finally:
            servers.stop(proc)
        r.update(server="tandem serve", config=label, command=" ".join(cmd))
        runs.append(r)
        print_row(r)

    def llama_run(label, parallel, cells, extra):
        port = 18441 + len(runs)
        cmd = [args.llama_server, "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
               "-t", str(args.threads), "--ctx-size", str(cells), "--parallel", str(parallel),
               "--metrics"] + extra
        url = "http://127.0.0.1:%d" % port
        proc = servers.start(cmd, url, "/tmp/kv-capacity-%d.log" % len(runs))
        try:
            post(url, {"prompt": warm, "max_tokens": args.max_tokens, "temperature": 0})
            r = burst(url, prompts, args.max_tokens, "llamacpp:requests_processing", None)
        finally:
            servers.stop(proc)
        r.update(server="llama-server", config=label, command=" ".join(cmd),
                 kv_cells=cells, kv_bytes=int(cells * bpc))
        runs.append(r)
        print_row(r)

    print("kv_capacity: %d requests of %d words (+%d tokens each) in %.0f MiB of KV per server"
          % (args.clients, args.prompt_words, args.max_tokens, args.kv_mib), flush=True)
    bpc = llama_bytes_per_cell(args, 18440)
    cells = int(args.kv_mib * MIB / bpc) // 256 * 256  # llama.cpp pads its cells to 256
    tandem_run("full cache", [])
    tandem_run("%s %s" % (args.policy, args.budget),
               ["--kv-policy", args.policy, "--kv-budget", args.budget])
    need = max(max(r["prompt_tokens"]) for r in runs if r["prompt_tokens"]) + args.max_tokens
    llama_run("one slot per request (%d cells each)" % (cells // max(1, cells // need)),
              max(1, cells // need), cells, ["--no-kv-unified"])
    llama_run("unified cache", args.clients, cells, ["--kv-unified"])
    doc = {"schema_version": 1, "bench": "serve_kv_capacity", "command": " ".join(sys.argv),
           "settings": {"kv_mib": args.kv_mib, "clients": args.clients,
                        "prompt_words": args.prompt_words, "max_tokens": args.max_tokens,
                        "threads": args.threads, "model": os.path.basename(args.model),
                        "llama_kv_bytes_per_cell": bpc, "llama_cells": cells},
           "system": {"cpus": os.cpu_count()}, "runs": runs}
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print("kv_capacity: wrote", args.out)


def print_row(r):
    peak = ("%.1f MiB" % (r["peak_kv_bytes"] / MIB)) if r.get("peak_kv_bytes") else "-"
    print("%-13s %-40s most together %3d, completed %3d/%d, errors %d, %6.1f s, peak KV %s"
          % (r["server"], r["config"], r["most_running_together"], r["completed"],
             r["requests"], r["errors"], r["wall_s"], peak), flush=True)
    if r["first_error"]:
        print("    first error:", r["first_error"][:200], flush=True)


if __name__ == "__main__":
    main()
