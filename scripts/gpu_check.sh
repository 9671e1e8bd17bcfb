#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The one GPU check, for the minutes a GPU machine is lent (docs/gpu.md gives the exact `device` call).
# The lent machine has CUDA, cmake and python3 but none of tandem's Debian build dependencies, and nothing can
# be fetched there, so the check is built here and runs there:
#
#   scripts/gpu_check.sh prepare   # here: build the tool, the CUDA module and every CUDA test (sm_90), pack
#                                  # them with the shared libraries they need into .gpu/bundle.tar.xz (< 64 MiB)
#   scripts/gpu_check.sh run       # there: unpack, then every CUDA test with TANDEM_REQUIRE_GPU=1 (a skip is a
#                                  # failure), compute-sanitizer memcheck on a subset, the short GPU benchmarks
#                                  # (LLM decode on a generated 7B-shaped model, ResNet-50 cuDNN vs the CPU,
#                                  # recsys on cuda:0); writes gpu-check.md and gpu-check.json to $OUT
#
# Each step has its own time limit, so one hang cannot eat the lease; the whole run fits in 8 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cuda_tests=(tandem_cuda_tests tandem_consistency_tests tandem_llm_cuda_tests tandem_kv_quant_cuda_tests
  tandem_recsys_cuda_tests cnn_cuda_test)

prepare() {
  set -e
  source scripts/lib/phase.sh
  local build=build-gpu stage=.gpu/stage
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTANDEM_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DTANDEM_BUILD_BENCH=OFF >/dev/null
  quiet_build "$build" tandem_cli tandem_cuda "${cuda_tests[@]}"
  rm -rf .gpu && mkdir -p "$stage/bin" "$stage/lib"
  cp "$build/bin/tandem" "$stage/bin/"
  for t in "${cuda_tests[@]}"; do cp "$build/bin/$t" "$stage/bin/"; done
  cp -P "$build"/lib/libtandem*.so* "$stage/lib/"
  # Every shared library the binaries load, except the C/C++ runtime and CUDA's own (the machine has newer ones).
  ldd "$stage"/bin/* "$stage"/lib/*.so* 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux[^/]*)\.so|/libcu[a-z]*\.so|/usr/local/cuda' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
  cp -r scripts configs "$stage/"
  tar -C .gpu -cJf .gpu/bundle.tar.xz stage
  rm -rf "$stage"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
  echo "gpu_check: .gpu/bundle.tar.xz $(du -m .gpu/bundle.tar.xz | cut -f1) MiB (carry limit 64 MiB)"
}

# step NAME SECONDS CMD...: runs CMD under a time limit, logs to $OUT/log.txt, records the result.
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s%N)
  echo "== $name" | tee -a "$OUT/log.txt"
  timeout --kill-after=10 "$limit" "$@" >>"$OUT/log.txt" 2>&1
  rc=$?
  local ms=$((($(date +%s%N) - t0) / 1000000))
  local secs=$((ms / 1000)).$((ms % 1000 / 100))
  local verdict=pass
  [ "$rc" -eq 0 ] || verdict=fail
  [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && verdict="timeout (${limit}s)"
  printf '| %s | %s | %s |\n' "$name" "$verdict" "$secs" >>"$OUT/steps.md"
  printf '{"step": "%s", "result": "%s", "rc": %d, "seconds": %s}\n' "$name" "$verdict" "$rc" "$secs" \
    >>"$OUT/steps.jsonl"
  echo "   $verdict (rc $rc, $secs s)"
}

run() {
  OUT=${OUT:-$root/gpu-check-out}
  mkdir -p "$OUT"
  : >"$OUT/log.txt" && : >"$OUT/steps.md" && : >"$OUT/steps.jsonl"
  local dir=/tmp/tandem-gpu
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf .gpu/bundle.tar.xz
  local stage=$dir/stage bin=$dir/stage/bin
  # cuDNN and cuBLAS from the machine: the CUDA toolkit's folder and the pip wheels beside PyTorch.
  local extra
  extra=$(python3 - <<'EOF' 2>/dev/null
import importlib, os
dirs = []
for m in ("nvidia.cudnn", "nvidia.cublas", "nvidia.cuda_runtime"):
    try:
        mod = importlib.import_module(m)
        dirs += [os.path.join(p, "lib") for p in mod.__path__]
    except ImportError:
        pass
print(":".join(d for d in dirs if os.path.isdir(d)))
EOF
)
  export LD_LIBRARY_PATH="$stage/lib:/usr/local/cuda/lib64:${extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_REQUIRE_GPU=1 TANDEM_BACKEND_PATH="$stage/lib" TANDEM_CACHE_DIR=/tmp/tandem-cache
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" 2>&1

  step "tandem devices" 30 "$bin/tandem" devices
  step "tandem_cuda_tests (module, allocator, streams, events)" 90 "$bin/tandem_cuda_tests" --gtest_brief=1
  step "consistency on cuda:0 (every op vs the CPU reference)" 120 \
    env TANDEM_CONSISTENCY_DEVICE=cuda "$bin/tandem_consistency_tests" --gtest_brief=1 --gtest_filter=-*CpuOnly.*
  step "tandem_llm_cuda_tests (engine on cuda:0 vs CPU)" 120 "$bin/tandem_llm_cuda_tests" --gtest_brief=1
  step "tandem_kv_quant_cuda_tests (quantized KV attention)" 90 "$bin/tandem_kv_quant_cuda_tests" --gtest_brief=1
  step "tandem_recsys_cuda_tests (recsys models, device executor)" 90 "$bin/tandem_recsys_cuda_tests" --gtest_brief=1
  python3 "$stage/scripts/cnn/gen_models.py" --out /tmp/cnn_models --models resnet50,tiny_cnn --reference \
    >>"$OUT/log.txt" 2>&1 || echo "gen_models failed (see log)" >>"$OUT/log.txt"
  step "cnn_cuda_test (cuDNN runner vs the CPU executor)" 120 \
    env TANDEM_CNN_MODELS=/tmp/cnn_models "$bin/cnn_cuda_test" --gtest_brief=1
  if command -v compute-sanitizer >/dev/null; then
    step "memcheck: consistency (convert, paged attention, embedding bag)" 120 \
      compute-sanitizer --tool memcheck --error-exitcode 1 env TANDEM_CONSISTENCY_DEVICE=cuda \
      "$bin/tandem_consistency_tests" --gtest_brief=1 --gtest_filter='Convert.*:PagedAttention.*:EmbeddingBag.*'
    step "memcheck: kv-quant attention" 120 compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$bin/tandem_kv_quant_cuda_tests" --gtest_brief=1
  fi
  # bench-llm runs on the CPU; it writes the generated model, which generate then decodes on cuda:0 (timing on
  # stderr: prefill and decode tokens/s, TTFT).
  step "LLM: generate a llama7b-shaped model (2 layers, q4_1; CPU bench as a side effect)" 180 \
    "$bin/tandem" bench-llm --synthetic llama7b:2 -p 64 -n 16 -r 1 --no-bandwidth -o json
  local llm
  llm=$(find "$TANDEM_CACHE_DIR" -name '*-2l-q4_1.gguf' | head -n 1)
  step "bench: LLM decode on cuda:0 (llama7b-shaped, 2 layers, q4_1)" 90 \
    "$bin/tandem" generate -m "$llm" -d cuda:0 -p "The history of the city" -n 128 --no-progress
  step "bench: ResNet-50 cuDNN" 60 "$bin/tandem" cnn-run -m /tmp/cnn_models/resnet50.onnx -d cuda:0 -r 20 -o json
  step "bench: ResNet-50 CPU (16 cores)" 60 "$bin/tandem" cnn-run -m /tmp/cnn_models/resnet50.onnx -r 5 -o json
  step "bench: rec-serve RM2 on cuda:0, 8 clients" 30 \
    "$bin/tandem" rec-serve --device cuda:0 -m rm2 -c 8 -d 3 -p stream-pool --table-budget 512 -o json
  step "bench: kernels on cuda:0" 60 "$bin/tandem" bench -d cuda:0 -r 5 -o json

  {
    echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "GPU: $(cat "$OUT/gpu.txt")"
    echo
    echo "| step | result | seconds |"
    echo "|---|---|---:|"
    cat "$OUT/steps.md"
    echo
    echo "Failing tests and benchmark outputs: log.txt."
  } >"$OUT/gpu-check.md"
  python3 -c "import json,sys; print(json.dumps({'gpu': open(sys.argv[1]).read().strip(), 'steps': [json.loads(l) for l in open(sys.argv[2])]}, indent=1))" \
    "$OUT/gpu.txt" "$OUT/steps.jsonl" >"$OUT/gpu-check.json"
  cat "$OUT/gpu-check.md"
  grep -E 'FAILED|Failure|error|ERROR SUMMARY' "$OUT/log.txt" | head -40
  ! grep -q '| fail\|| timeout' "$OUT/steps.md"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu_check.sh prepare|run (docs/gpu.md)" >&2; exit 2 ;;
esac
