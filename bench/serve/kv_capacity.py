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

With --contexts (no llama-server): each KV policy's throughput against the full cache at equal KV
memory, per context length C. M = --m-full x the bytes of one full-cache request (prompt of about
C - max_tokens tokens, measured on a probe request); every policy's server gets --kv-max-mib M,
whose admission lets a request in only while its full cache fits beside the others (each counted
at its measured or reserved bytes), so each sequence is compressed right after its own prefill
and the allocator peak stays near M. The same burst of --clients requests goes to each server,
policies interleaved per round. Reported per run: decode tok/s (tokens of the steps in which every
sequence decodes, over those steps' time: the server's tandem_decode_step_seconds), end-to-end
tok/s (generated tokens over the burst's wall time), the decode rate of the batch M holds (the
most sequences running together over their mean decode step), the
KV bytes (polled) and the allocator's peak tensor bytes above its idle level, and the decode step
time by batch size with the policies' share.

  python3 bench/serve/kv_capacity.py --contexts 2048,4096,8192 --policies full,clusterattn \
      [--budget 512] [--clients 16] [--max-tokens 128] [--rounds 1] [--out FILE]
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


def scrape(url):
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        return r.read().decode()


def decode_steps(text):
    """{rows: [steps, seconds, policy seconds]} from tandem_decode_step_* lines."""
    steps = {}
    for name, k in (("tandem_decode_step_seconds_count", 0), ("tandem_decode_step_seconds_sum", 1),
                    ("tandem_decode_step_policy_seconds_total", 2)):
        for rows, v in re.findall(r"^" + name + r'\{rows="(\d+)"\} ([0-9.eE+-]+)$', text, re.M):
            steps.setdefault(int(rows), [0, 0.0, 0.0])[k] = float(v)
    return steps


def policy_flags(name, budget, window):
    """The serve flags of a policy name ("full": none); ClusterAttn takes its fill calibration
    at the budget (docs/results/kv-eviction-clusterattn-fill-bB.json)."""
    if name == "full":
        return []
    flags = ["--kv-policy", name, "--kv-budget", str(budget), "--kv-window", str(window)]
    if name.startswith("clusterattn"):
        here = os.path.dirname(os.path.abspath(__file__))
        flags += ["--kv-calibration", os.path.join(
            here, "..", "..", "docs", "results", "kv-eviction-clusterattn-fill-b%d.json" % budget)]
    return flags


def throughput(args):
    """Every policy at equal KV memory, per context (see the module's docstring)."""
    words = open(args.text, encoding="utf-8", errors="replace").read().split()
    policies = args.policies.split(",")
    doc = {"schema_version": 1, "bench": "serve_kv_throughput", "command": " ".join(sys.argv),
           "settings": {"contexts": args.contexts, "policies": policies, "budget": args.budget,
                        "window": args.window, "clients": args.clients,
                        "max_tokens": args.max_tokens, "m_full": args.m_full,
                        "parallel": args.parallel, "threads": args.threads,
                        "rounds": args.rounds, "text": os.path.basename(args.text),
                        "model": os.path.basename(args.model)},
           "system": {"cpus": os.cpu_count()}, "contexts": []}
    port = [18540]

    def serve(extra, kv_mib, log):
        port[0] += 1
        cmd = [args.tandem, "serve", "-m", args.model, "--port", str(port[0]), "-t",
               str(args.threads), "--parallel", str(args.parallel), "--queue",
               str(args.clients + 4), "--no-progress"] + (
                   ["--kv-max-mib", "%.3f" % kv_mib] if kv_mib else []) + extra
        url = "http://127.0.0.1:%d" % port[0]
        return servers.start(cmd, url, log), url, cmd

    for ctx in [int(c) for c in args.contexts.split(",")]:
        target = int(ctx * 0.97) - args.max_tokens  # prompt tokens (margin: prompts vary)
        stride = max(1, (len(words) - 2 * target) // (args.clients + 1))
        # Probe: words per token of this text, and the bytes of one full-cache request.
        proc, url, _ = serve([], 0, "/tmp/kv-throughput-probe.log")
        try:
            n = int(target * 0.75)
            r = post(url, {"prompt": " ".join(words[:n]), "max_tokens": args.max_tokens,
                           "temperature": 0})
            n = int(n * target / r["usage"]["prompt_tokens"])
            warm = " ".join(words[:n])
            r = post(url, {"prompt": warm, "max_tokens": args.max_tokens, "temperature": 0})
        finally:
            servers.stop(proc)
        full_bytes = r["tandem"]["kv_bytes"]
        kv_mib = args.m_full * full_bytes / MIB
        prompts = [" ".join(words[(i + 1) * stride:(i + 1) * stride + n])
                   for i in range(args.clients)]
        entry = {"context": ctx, "prompt_words": n, "probe_prompt_tokens":
                 r["usage"]["prompt_tokens"], "full_request_kv_bytes": full_bytes,
                 "kv_max_mib": kv_mib, "runs": []}
        print("kv_throughput: context %d: prompts of %d words (%d tokens in the probe), "
              "M = %.1f MiB (%.2f x one full request's %.1f MiB)"
              % (ctx, n, r["usage"]["prompt_tokens"], kv_mib, args.m_full, full_bytes / MIB),
              flush=True)
        for rnd in range(args.rounds):
            for pol in policies:
                proc, url, cmd = serve(policy_flags(pol, args.budget, args.window), kv_mib,
                                       "/tmp/kv-throughput-%s.log" % pol)
                try:
                    idle = metric(scrape(url), "tandem_tensor_bytes")
                    post(url, {"prompt": warm, "max_tokens": args.max_tokens, "temperature": 0})
                    before = decode_steps(scrape(url))
                    b = burst(url, prompts, args.max_tokens, "tandem_running_sequences",
                              "tandem_kv_bytes")
                    text = scrape(url)
                finally:
                    servers.stop(proc)
                after = decode_steps(text)
                steps = {rows: [v[k] - before.get(rows, [0, 0.0, 0.0])[k] for k in range(3)]
                         for rows, v in after.items()}
                steps = {rows: v for rows, v in steps.items() if v[0] > 0}
                d_tokens = sum(rows * v[0] for rows, v in steps.items())
                d_secs = sum(v[1] for v in steps.values())
                b.update(policy=pol, budget=None if pol == "full" else args.budget, round=rnd,
                         command=" ".join(cmd), tensor_idle_bytes=int(idle),
                         tensor_peak_bytes=int(metric(text, "tandem_tensor_peak_bytes")),
                         e2e_tokens_per_s=b["completion_tokens_total"] / b["wall_s"],
                         decode_tokens=int(d_tokens), decode_s=d_secs,
                         decode_tokens_per_s=d_tokens / d_secs if d_secs else None,
                         decode_steps={str(k): {"steps": int(v[0]), "seconds": v[1],
                                                "policy_seconds": v[2]}
                                       for k, v in sorted(steps.items())})
                b["peak_above_idle_bytes"] = b["tensor_peak_bytes"] - b["tensor_idle_bytes"]
                # The decode rate of the batch M holds: its rows over its mean decode step.
                fit = steps.get(b["most_running_together"])
                b["decode_at_fit_tokens_per_s"] = (b["most_running_together"] * fit[0] / fit[1]
                                                   if fit and fit[1] > 0 else None)
                entry["runs"].append(b)
                print("  %-16s most together %2d, done %d/%d, %5.1f s, decode %6.1f tok/s, "
                      "e2e %5.1f tok/s, peak KV %6.1f MiB, tensor peak %6.1f MiB (M %.1f)"
                      % (pol, b["most_running_together"], b["completed"], b["requests"],
                         b["wall_s"], b["decode_tokens_per_s"] or 0, b["e2e_tokens_per_s"],
                         (b["peak_kv_bytes"] or 0) / MIB, b["peak_above_idle_bytes"] / MIB,
                         kv_mib), flush=True)
                if b["first_error"]:
                    print("    first error:", b["first_error"][:200], flush=True)
        doc["contexts"].append(entry)
        if args.out:  # after every context: a late failure keeps the finished ones
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump(doc, f, indent=1)
    if args.out:
        print("kv_throughput: wrote", args.out)


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
    servers.add_server_args(ap, llama_required=False)
    ap.add_argument("--kv-mib", type=float, default=64.0, help="KV memory of every server")
    ap.add_argument("--clients", type=int, help="requests in the burst (32; --contexts: 16)")
    ap.add_argument("--prompt-words", type=int, default=380)
    ap.add_argument("--max-tokens", type=int, help="tokens per request (16; --contexts: 128)")
    ap.add_argument("--policy", default="clusterattn")
    ap.add_argument("--budget", help="KV budget (10%%; --contexts: tokens per head, 512)")
    ap.add_argument("--contexts", help="comma-separated context lengths: the throughput study")
    ap.add_argument("--policies", default="full,clusterattn", help="with --contexts")
    ap.add_argument("--window", type=int, default=32, help="with --contexts")
    ap.add_argument("--m-full", type=float, default=2.05,
                    help="with --contexts: M in full-cache requests")
    ap.add_argument("--parallel", type=int, default=16, help="with --contexts: batch at most")
    ap.add_argument("--rounds", type=int, default=1, help="with --contexts: repeats, interleaved")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.contexts:
        args.clients = args.clients or 16
        args.max_tokens = args.max_tokens or 128
        args.budget = int(args.budget or 512)
        return throughput(args)
    if not args.llama_server:
        sys.exit("kv_capacity: --llama-server is required (or --contexts)")
    args.clients = args.clients or 32
    args.max_tokens = args.max_tokens or 16
    args.budget = args.budget or "10%"
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
