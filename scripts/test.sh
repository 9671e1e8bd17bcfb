#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds everything (Release) and runs the whole test suite with ctest. CUDA tests skip without a GPU;
# TANDEM_REQUIRE_GPU=1 makes such skips fail. Usage: scripts/test.sh [build dir] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/phase.sh
build=${1:-build}
shift || true
phase "setup (Debian packages)" scripts/setup.sh
# The library as a unity build (cmake/TandemBuildSpeed.cmake: 8 sources a translation unit): a full
# build takes about a quarter less CPU time; pass -DTANDEM_UNITY_LIBRARY=OFF for one TU per source.
phase "configure $build" quietly cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DTANDEM_UNITY_LIBRARY=ON "$@"
phase "build $build (Release, everything)" quiet_build "$build"
# Generated-weight CNNs and their ONNX Runtime references for the cnn_models tests (skipped without them).
# The generator and the independent runtime come from PyPI (development only, never at run time).
if ! python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  pip_pkgs=(onnx==1.23.2 onnxruntime==1.32.0 numpy==2.4.6)
  python3 -m pip install --quiet "${pip_pkgs[@]}" 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages "${pip_pkgs[@]}" ||
    echo "test.sh: could not pip install ${pip_pkgs[*]}" >&2
fi
if python3 -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  phase "generated CNN models + ONNX Runtime references" \
    python3 scripts/cnn/gen_models.py --out "$build/cnn_models" --reference --skip-existing
else
  echo "test.sh: pip packages onnx, onnxruntime, numpy missing: the cnn_models tests will skip" >&2
fi
# The official OpenAI Python client for the `tandem serve` test (tests/serve/openai_client_test.py; skipped
# without it). Development only; about 10 s to install.
if ! python3 -c "import openai" 2>/dev/null; then
  python3 -m pip install --quiet openai==3.60.0 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages openai==3.60.0 ||
    echo "test.sh: could not pip install openai: the serve_openai_client test will skip" >&2
fi
phase "tests (ctest, all)" ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
