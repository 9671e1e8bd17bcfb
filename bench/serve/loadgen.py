#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Load generator for `tandem serve` (or any OpenAI-compatible server): N concurrent clients, each
sending streaming /v1/completions requests back to back, prompts cut from a long real text (the
Austen or KJV text of scripts/llm/get_texts.sh). Per client count it measures request throughput,
output tokens/s, time to first token (p50/p99) and the gap between streamed chunks (inter-token
latency, p50/p99; a chunk holds one token unless the reader fell behind). Python stdlib only.

  build/bin/tandem serve --port 8080 --parallel 8 &
  python3 bench/serve/loadgen.py --url http://127.0.0.1:8080 --clients 1,2,4,8 --duration 20 \
      --out bench/results/serve-$(hostname)-$(date +%F).json
"""
import argparse
import http.client
import json
import os
import platform
import random
import subprocess
import sys
import threading
import time
import urllib.parse


def percentile(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(url, prompt, max_tokens, key, timeout):
    """Streams one completion; returns (ttft_s, [chunk gaps], completion_tokens) or raises."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
    # include_usage: the OpenAI way to get usage in a stream (llama-server needs it).
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:200]))
    first = None
    last = None
    gaps = []
    tokens = None
    chunks = 0
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise RuntimeError(chunk["error"].get("message"))
        now = time.perf_counter()
        text = chunk["choices"][0].get("text", "") if chunk.get("choices") else ""
        if text:
            chunks += 1
            if first is None:
                first = now - t0
            else:
                gaps.append(now - last)
            last = now
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    if tokens is None:  # a server that sends no usage: one token per text chunk
        tokens = chunks
    return first if first is not None else time.perf_counter() - t0, gaps, tokens


def run_level(args, words, clients):
    stop_at = time.perf_counter() + args.duration
    lock = threading.Lock()
    ttfts, gaps, errors = [], [], []
    done = [0, 0]  # requests, tokens

    def client(i):
        rng = random.Random(args.seed * 1000 + i)
        while time.perf_counter() < stop_at:
            start = rng.randrange(0, max(1, len(words) - args.prompt_words))
            prompt = " ".join(words[start:start + args.prompt_words])
            try:
                t, g, n = one_request(args.url, prompt, args.max_tokens, args.api_key, 600)
            except Exception as e:  # noqa: BLE001 - counted and reported
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                ttfts.append(t)
                gaps.extend(g)
                done[0] += 1
                done[1] += n

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "wall_s": wall,
        "requests": done[0],
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "requests_per_s": done[0] / wall,
        "output_tokens_per_s": done[1] / wall,
        "ttft_p50_s": percentile(ttfts, 0.5),
        "ttft_p99_s": percentile(ttfts, 0.99),
        "itl_p50_s": percentile(gaps, 0.5),
        "itl_p99_s": percentile(gaps, 0.99),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--clients", default="1,2,4,8", help="comma-separated client counts")
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per client count")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=200)
    ap.add_argument("--text", default=os.path.join(
        os.environ.get("TANDEM_TEXT_DIR", os.path.expanduser("~/.cache/tandem/texts")),
        "austen.txt"), help="text the prompts are cut from (scripts/llm/get_texts.sh)")
    ap.add_argument("--api-key", default="")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="write the results JSON here")
    args = ap.parse_args()
    if not os.path.exists(args.text):
        sys.exit("loadgen: %s not found; run scripts/llm/get_texts.sh" % args.text)
    with open(args.text, encoding="utf-8", errors="replace") as f:
        words = f.read().split()
    levels = []
    for c in [int(x) for x in args.clients.split(",")]:
        r = run_level(args, words, c)
        levels.append(r)
        print("%3d clients: %6.2f req/s %8.1f tok/s  TTFT p50 %.3f p99 %.3f s  ITL p50 %.4f p99 "
              "%.4f s  (%d requests, %d errors)" % (
                  c, r["requests_per_s"], r["output_tokens_per_s"], r["ttft_p50_s"] or 0,
                  r["ttft_p99_s"] or 0, r["itl_p50_s"] or 0, r["itl_p99_s"] or 0,
                  r["requests"], r["errors"]), flush=True)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
    except OSError:
        commit = ""
    doc = {
        "schema_version": 1,
        "bench": "serve_loadgen",
        "command": " ".join(sys.argv),
        "system": {"host": platform.node(), "cpus": os.cpu_count(), "machine": platform.machine(),
                   "python": platform.python_version()},
        "build": {"commit": commit},
        "settings": {"url": args.url, "duration_s": args.duration, "max_tokens": args.max_tokens,
                     "prompt_words": args.prompt_words, "text": os.path.basename(args.text)},
        "levels": levels,
    }
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1)
        print("loadgen: wrote", args.out)


if __name__ == "__main__":
    main()
