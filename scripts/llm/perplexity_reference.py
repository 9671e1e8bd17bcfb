#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs llama.cpp's llama-perplexity and `tandem perplexity` on the same texts and contexts.

  scripts/llm/perplexity_reference.py --llama-perplexity BIN [--tandem build/bin/tandem]
      [-m MODEL] [--threads 2] [--out tests/llm/data/perplexity_reference.json]
      RUN [RUN ...]       RUN = TEXT_FILE:CTX:CHUNKS

For each run it records llama.cpp's "Final estimate: PPL = x +/- y", the exact command, the
llama.cpp commit (git rev-parse HEAD in the source tree above the binary's build folder), and
tandem's number measured in the same call (for information; the test recomputes it). Text paths
are stored relative to the JSON's folder when they lie inside it. Standard library only.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def default_model():
    cache = os.environ.get("TANDEM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tandem")
    return os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def git_head(path):
    try:
        return subprocess.run(["git", "-C", path, "rev-parse", "HEAD"], check=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def sha256(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--llama-perplexity", required=True)
    ap.add_argument("--tandem", default="build/bin/tandem")
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="tests/llm/data/perplexity_reference.json")
    ap.add_argument("--llama-args", default="-nr",
                    help="extra llama-perplexity arguments (default -nr: no extra buffer types; "
                    "on the 2-vCPU VM its AMX path crashes with SIGSEGV)")
    ap.add_argument("runs", nargs="+", help="TEXT_FILE:CTX:CHUNKS")
    a = ap.parse_args()
    lp = os.path.abspath(a.llama_perplexity)
    src = os.path.abspath(os.path.join(os.path.dirname(lp), "..", ".."))
    out_dir = os.path.dirname(os.path.abspath(a.out))
    runs = []
    for spec in a.runs:
        text, ctx, chunks = spec.rsplit(":", 2)
        cmd = [lp, "-m", a.model, "-f", text, "-c", ctx, "--chunks", chunks, "-t",
               str(a.threads)] + a.llama_args.split()
        print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", p.stdout)
        if p.returncode != 0 or not m:
            sys.exit(f"llama-perplexity failed ({p.returncode}):\n{p.stdout[-3000:]}")
        chunk_line = re.search(r"calculating perplexity over (\d+) chunks", p.stdout)
        tcmd = [a.tandem, "perplexity", "-m", a.model, "-f", text, "-c", ctx, "--chunks", chunks,
                "-t", str(a.threads), "-o", "json", "--no-progress"]
        print("+ " + " ".join(tcmd), file=sys.stderr, flush=True)
        ours = json.loads(subprocess.run(tcmd, check=True, stdout=subprocess.PIPE,
                                         text=True).stdout)["results"]
        abs_text = os.path.abspath(text)
        rel = os.path.relpath(abs_text, out_dir)
        theirs = float(m.group(1))
        runs.append({
            "text": rel if not rel.startswith("..") else abs_text,
            "text_sha256": sha256(abs_text),
            "ctx": int(ctx),
            "chunks": int(chunks),
            "llamacpp_chunks": int(chunk_line.group(1)) if chunk_line else None,
            "llamacpp_ppl": theirs,
            "llamacpp_ppl_error": float(m.group(2)),
            "llamacpp_command": " ".join(cmd),
            "tandem_ppl_when_recorded": ours["ppl"],
            "tandem_text_tokens": ours["text_tokens"],
            "relative_difference": ours["ppl"] / theirs - 1.0,
        })
        print(f"{text} ctx {ctx} chunks {chunks}: llama.cpp {theirs:.4f}, tandem "
              f"{ours['ppl']:.4f} ({100 * (ours['ppl'] / theirs - 1):+.2f}%)", file=sys.stderr)
    doc = {
        "note": "llama-perplexity (llama.cpp, CPU build by scripts/llm/build_llamacpp.sh: Release, "
                "GGML_NATIVE=ON) on the same text, ctx and chunks as tandem perplexity; written by "
                "scripts/llm/perplexity_reference.py. The test asserts tandem within 1%.",
        "llamacpp_commit": git_head(src),
        "llamacpp_source": "llama-cpp-python 0.3.36 sdist (vendor/llama.cpp), from PyPI",
        "model": os.path.basename(a.model),
        "model_sha256": sha256(a.model),
        "runs": runs,
    }
    with open(a.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
