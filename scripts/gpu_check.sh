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
#                                  # (device copy bandwidth, decode GEMV and paged decode attention as a share
#                                  # of it, LLM decode on a generated 7B-shaped model, ResNet-50 cuDNN vs the
#                                  # CPU, recsys on cuda:0); writes gpu-check.md and gpu-check.json to $OUT
#   scripts/gpu_check.sh llama     # there, a second call: build llama.cpp's CUDA backend and llama-bench from
#                                  # the packed source subset (prepare packs it when LLAMA_SRC exists), then
#                                  # decode and prefill tokens/s of llama.cpp and tandem on the same generated
#                                  # SmolLM2- and 7B-shaped GGUF files; writes llama-vs-tandem.md to $OUT
#
# Each step has its own time limit, so one hang cannot eat the lease; the whole run fits in 8 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# llama.cpp's source tree (the llama-cpp-python sdist's vendor/llama.cpp); only `prepare` reads it.
LLAMA_SRC=${LLAMA_SRC:-/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp}
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
  if [ -d "$LLAMA_SRC/ggml" ]; then
    # What llama-bench's build needs (the tools folder reduced to llama-bench), never committed.
    local lsrc=.gpu/llama-src
    mkdir -p "$lsrc/tools"
    cp -r "$LLAMA_SRC"/{CMakeLists.txt,cmake,ggml,src,common,include,vendor,licenses} "$lsrc/"
    cp -r "$LLAMA_SRC/tools/llama-bench" "$lsrc/tools/"
    echo 'add_subdirectory(llama-bench)' >"$lsrc/tools/CMakeLists.txt"
    rm -rf "$lsrc/ggml/src/ggml-"{vulkan,sycl,metal,opencl,cann,musa,hip,webgpu,zdnn,kompute}
    tar -C .gpu -cJf .gpu/llama-src.tar.xz llama-src
    rm -rf "$lsrc"
    echo "gpu_check: .gpu/llama-src.tar.xz $(du -m .gpu/llama-src.tar.xz | cut -f1) MiB (for 'gpu_check.sh llama')"
  fi
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

# Unpacks the bundle to /tmp/tandem-gpu and sets up the environment of its binaries.
unpack() {
  OUT=${OUT:-$root/gpu-check-out}
  mkdir -p "$OUT"
  : >"$OUT/log.txt" && : >"$OUT/steps.md" && : >"$OUT/steps.jsonl"
  local dir=/tmp/tandem-gpu
  rm -rf "$dir" && mkdir -p "$dir" && tar -C "$dir" -xJf .gpu/bundle.tar.xz
  stage=$dir/stage bin=$dir/stage/bin
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
}

run() {
  local stage bin
  unpack

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
      "$bin/tandem_consistency_tests" --gtest_brief=1 \
      --gtest_filter='Convert.*:PagedAttention.*:EmbeddingBag.*:Gemm.Int8ActivationsWithinTheirRounding'
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
  # Device copy bandwidth, then the decode GEMV (int8 activations) at SmolLM2 and 7B shapes and paged
  # decode attention at 8k context, each with its GB/s as a share of the copy's (the issue's targets:
  # GEMV >= 60 %, attention >= 50 %).
  step "bench: copy bandwidth, decode GEMV and attention on cuda:0" 90 \
    bash -c '"$0" bench -d cuda:0 -s copy,decode -r 20 --warmup 3 --no-progress | tee "$1/decode-bench.md"' \
    "$bin/tandem" "$OUT"

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

# tokens/s lines of `tandem generate` (stderr) and llama-bench's markdown table, for one model file.
compare_model() {
  local name=$1 model=$2
  step "llama.cpp CUDA: llama-bench $name (pp512, tg128)" 120 \
    bash -c '"$0" -m "$1" -ngl 99 -p 512 -n 128 -r 3 -o md | tee -a "$2/llama-vs-tandem.md"' \
    "$llama_bin/llama-bench" "$model" "$OUT"
  local prompt
  prompt=$(python3 -c "print(' '.join(['the history of the city and its river'] * 64))")
  step "tandem cuda:0: generate $name (long prompt, 128 tokens)" 120 \
    bash -c '"$0" generate -m "$1" -d cuda:0 -p "$2" -n 128 --no-progress 2>&1 >/dev/null | tee -a "$3/llama-vs-tandem.md"' \
    "$bin/tandem" "$model" "$prompt" "$OUT"
}

llama() {
  local stage bin
  unpack
  [ -f .gpu/llama-src.tar.xz ] || { echo "no .gpu/llama-src.tar.xz: run prepare where LLAMA_SRC exists" >&2; exit 2; }
  local src=/tmp/llama-src build=/tmp/llama-build
  # The build (144 CUDA objects) may not fit one call with the benchmarks: a second call on the still-warm
  # machine finds llama-bench built (or resumes the build) and goes on.
  if [ ! -x "$build/bin/llama-bench" ]; then
    [ -d "$build" ] || {
      rm -rf "$src" && tar -C /tmp -xJf .gpu/llama-src.tar.xz
      step "llama.cpp: configure (GGML_CUDA=ON, sm_90)" 120 cmake -S "$src" -B "$build" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_TOOLS=ON
    }
    step "llama.cpp: build llama-bench" 420 cmake --build "$build" -j "$(nproc)" --target llama-bench
  fi
  llama_bin=$build/bin
  # The same generated GGUF files for both (tandem's synthetic writer; bench-llm's short CPU run is a side
  # effect): SmolLM2-135M's shape at full depth, and LLaMA-7B's at 8 of its 32 layers.
  step "models: SmolLM2-shaped (q4_0) and 7B-shaped (8 layers, q4_0)" 240 bash -c \
    '"$0" bench-llm --synthetic smollm2-135m --synthetic-dtype q4_0 -p 8 -n 2 -r 1 --no-bandwidth --no-progress &&
     "$0" bench-llm --synthetic llama7b:8 --synthetic-dtype q4_0 -p 8 -n 2 -r 1 --no-bandwidth --no-progress' \
    "$bin/tandem"
  echo "# llama.cpp CUDA vs tandem cuda:0 $(date -u +%Y-%m-%dT%H:%MZ), $(cat "$OUT/gpu.txt")" >"$OUT/llama-vs-tandem.md"
  local m
  m=$(find "$TANDEM_CACHE_DIR" -name '*smollm2*q4_0.gguf' | head -n 1)
  [ -n "$m" ] && compare_model smollm2 "$m"
  m=$(find "$TANDEM_CACHE_DIR" -name '*-8l-q4_0.gguf' | head -n 1)
  [ -n "$m" ] && compare_model llama7b-8l "$m"
  cat "$OUT/steps.md"
  ! grep -q '| fail\|| timeout' "$OUT/steps.md"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  llama) llama ;;
  *) echo "usage: scripts/gpu_check.sh prepare|run|llama (docs/gpu.md)" >&2; exit 2 ;;
esac
