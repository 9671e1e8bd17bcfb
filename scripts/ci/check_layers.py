#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that every #include in the library, tool, tests and benchmarks reaches only down the layers:
core <- backends <- runtime (sched) <- engines (llm, cnn, recsys) <- tools (examples, bench, tests).
The kernel toolkit (src/kernels: parallel_for, ISA dispatch, SIMD wrappers, GGUF blocks, the oneDNN door)
sits on the core and serves the CPU backend and the engines' own kernels.

A quoted include is resolved the way the build resolves it (the including file's folder, then include/,
src/, backends/cpu/, backends/cuda/, tests/); each resolved file belongs to a component, and each component
lists the components it may include. A backend's files are private to it: only the backend itself, and the
tests that check it, may include them. Known breaks that an open issue is removing are listed in ALLOWED
with that issue; a new break fails the check (exit 1) naming the file, the line and the rule.

  scripts/ci/check_layers.py            # check; prints the component graph with --graph
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SEARCH = ["include", "src", "backends/cpu", "backends/cuda", "tests"]

# Component of a path (first matching prefix wins).
COMPONENTS = [
    ("include/tandem/core/", "core"), ("include/tandem/ops/", "core"), ("include/tandem/export.h", "core"),
    ("src/core/", "core"), ("src/kernels/", "kernels"),
    ("backends/cpu/", "backend-cpu"), ("backends/cuda/", "backend-cuda"),
    ("include/tandem/sched/", "runtime"), ("src/sched/", "runtime"),
    ("include/tandem/llm/", "llm"), ("src/llm/", "llm"),
    ("include/tandem/cnn/", "cnn"), ("src/cnn/", "cnn"),
    ("include/tandem/recsys/", "recsys"), ("src/recsys/", "recsys"),
    ("examples/", "tools"), ("bench/", "tools"), ("tests/", "tests"),
]
# What each component may include (besides itself).
MAY_INCLUDE = {
    "core": set(),
    "kernels": {"core"},
    "backend-cpu": {"core", "kernels"},
    "backend-cuda": {"core"},
    "runtime": {"core"},
    "llm": {"core", "runtime", "kernels"},
    "cnn": {"core", "runtime", "kernels"},
    "recsys": {"core", "runtime", "kernels"},
    "tools": {"core", "runtime", "llm", "cnn", "recsys"},
    "tests": {"core", "kernels", "runtime", "llm", "cnn", "recsys", "backend-cpu", "backend-cuda", "tools"},
}
# Known breaks, each removed by the issue named (issue 15: the CUDA module finding engine runners through a
# generic extension lookup instead of including the CNN engine's header).
ALLOWED = {
    ("backends/cuda/cnn_runner.cpp", "include/tandem/cnn/device_runner.h"): 15,
}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE_DIRS = ["include", "src", "backends", "examples", "bench", "tests"]
SUFFIXES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".inc"}


def component(rel):
    for prefix, name in COMPONENTS:
        if rel.startswith(prefix):
            return name
    return None


def resolve(including, target):
    for base in [including.parent] + [ROOT / d for d in SEARCH]:
        p = (base / target).resolve()
        if p.is_file() and ROOT in p.parents:
            return p.relative_to(ROOT).as_posix()
    return None  # a generated or system header


def scan():
    for d in SOURCE_DIRS:
        for f in sorted((ROOT / d).rglob("*")):
            if f.suffix not in SUFFIXES or not f.is_file() or "fuzz/corpus" in f.as_posix():
                continue
            rel = f.relative_to(ROOT).as_posix()
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE_RE.match(line)
                if m:
                    yield rel, n, resolve(f, m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graph", action="store_true", help="print how often each component includes another")
    args = ap.parse_args()
    breaks, used_allowances, graph = [], set(), {}
    for rel, line, target in scan():
        if target is None:
            continue
        a, b = component(rel), component(target)
        if a is None or b is None or a == b:
            continue
        graph[(a, b)] = graph.get((a, b), 0) + 1
        if b in MAY_INCLUDE[a]:
            continue
        if (rel, target) in ALLOWED:
            used_allowances.add((rel, target))
            continue
        breaks.append(f"{rel}:{line}: {a} may not include {b} ({target}); may include: "
                      f"{', '.join(sorted(MAY_INCLUDE[a])) or 'only itself'}")
    if args.graph:
        for (a, b), n in sorted(graph.items()):
            print(f"{a:>13} -> {b:<13} {n}")
    stale = sorted(set(ALLOWED) - used_allowances)
    for rel, target in stale:
        breaks.append(f"{rel}: the allowance for {target} is no longer used: remove it from ALLOWED")
    for b in breaks:
        print(b, file=sys.stderr)
    print(f"check_layers: {len(breaks)} break(s), {len(used_allowances)} known (issue 15)")
    return 1 if breaks else 0


if __name__ == "__main__":
    sys.exit(main())
