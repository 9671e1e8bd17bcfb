#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages tandem builds with, only those missing (python3-pip fetches the default
# LLM). As root it runs apt-get; otherwise it prints the command to run.
# Usage: scripts/setup.sh [--check]   (--check: report only, exit 1 if missing)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git python3 python3-pip
  ccache  # optional: the build uses it when present (rebuilds and CI re-runs take minutes, not half an hour)
  libfmt-dev libspdlog-dev libeigen3-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev  # HTTP server and client of `tandem serve` and its tests (examples/tandem/serve)
  libdnnl-dev ocl-icd-opencl-dev libopenblas-dev
  libgtest-dev libbenchmark-dev
  libonnx-dev libprotobuf-dev libonnx-testdata
  libzmq3-dev cppzmq-dev  # the pipeline runtime's transport (src/sched)
  coinor-libclp-dev  # LP solver of the edge planners (DeepZoning's AWP, CoEdge; src/cnn/edge)
  libboost-graph-dev  # DADS's min cut (Boykov-Kolmogorov max flow, header-only; src/cnn/edge/dads.cpp)
  bible-kjv r-cran-janeaustenr  # real texts for `tandem perplexity` (scripts/llm/get_texts.sh)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi
echo "setup: missing: ${missing[*]}"
if [ "${1:-}" = "--check" ]; then exit 1; fi
if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${#missing[@]} package(s)"
