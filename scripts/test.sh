#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds everything (Release) and runs the whole test suite with ctest. CUDA tests skip without a GPU;
# TANDEM_REQUIRE_GPU=1 makes such skips fail. Usage: scripts/test.sh [build dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
scripts/setup.sh
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
