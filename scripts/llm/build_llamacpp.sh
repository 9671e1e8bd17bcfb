#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds llama.cpp (the peer for tandem's perplexity and bench-llm comparisons) from a checkout you
# already have, CPU-only, Release, GGML_NATIVE=ON, only the tools the comparison uses:
# llama-perplexity, llama-bench and llama-simple; with LLAMA_SERVER=1 also llama-server (the peer of
# `tandem serve`, bench/serve/compare_llama_server.py). Nothing of llama.cpp is vendored in tandem.
#
#   [LLAMA_SERVER=1] scripts/llm/build_llamacpp.sh /path/to/llama.cpp [build-dir] [jobs]
#
# One way to get a checkout through a package manager: the llama-cpp-python sdist bundles one,
#   python3 -m pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36
#   tar xzf llama_cpp_python-0.3.36.tar.gz   # source in llama_cpp_python-0.3.36/vendor/llama.cpp
# (0.3.36 bundles llama.cpp commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f, the one tandem's
# reference numbers were measured with).
# Prints the directory holding the binaries on its last line.
set -euo pipefail

src=${1:?usage: build_llamacpp.sh LLAMA_CPP_SOURCE [BUILD_DIR] [JOBS]}
build=${2:-$src/build-cpu}
jobs=${3:-2}
if [[ ! -f $src/CMakeLists.txt || ! -d $src/tools/perplexity ]]; then
  echo "build_llamacpp.sh: $src does not look like a llama.cpp checkout (no tools/perplexity)" >&2
  exit 2
fi
targets=(llama-perplexity llama-bench llama-simple)
server=OFF
if [[ ${LLAMA_SERVER:-0} == 1 ]]; then
  targets+=(llama-server)
  server=ON
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$server -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DBUILD_SHARED_LIBS=OFF >&2
cmake --build "$build" --target "${targets[@]}" -j "$jobs" >&2
echo "$build/bin"
