// SPDX-License-Identifier: Apache-2.0
// f32 GEMM on the projection shapes of one SmolLM2-135M layer (d 576, 9 query / 3 KV heads of 64,
// FFN 1536) and one LLaMA-7B layer (d 4096, FFN 11008): C[M, N] = A[M, K] * W[N, K]^T, the
// nn.Linear / GGUF weight layout, run through tandem (ops::gemm), oneDNN (dnnl_sgemm) and OpenBLAS
// (cblas_sgemm) on the same buffers. M is the number of tokens in the batch (1 = decode, 128/512 =
// prefill chunks).
#include <cstdio>
#include <map>
#include <memory>
#include <tuple>

#include "bench_common.h"
#include "tandem/ops/ops.h"

#if TANDEM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if TANDEM_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tandem::bench {
namespace {

struct GemmCase {
  std::string model;  // "smollm2" | "llama7b"
  std::string layer;  // "attn_q_o", ...
  int64_t m, n, k;
  std::string name() const {
    return model + "." + layer + ".m" + std::to_string(m) + "_n" + std::to_string(n) + "_k" +
           std::to_string(k);
  }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * k; }
  // Compulsory traffic: A and W read once, C written once.
  double bytes() const {
    return 4.0 *
           (static_cast<double>(m) * k + static_cast<double>(n) * k + static_cast<double>(m) * n);
  }
};

// The inputs of one shape, shared by every implementation (kept for the whole run: the largest set,
// LLaMA-7B's FFN, is 190 MB, and all of them together stay under 0.5 GB).
struct GemmData {
  Tensor a, w, c, c_check;
};

GemmData& gemm_data(const GemmCase& gc) {
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<GemmData>> cache;
  auto& slot = cache[{gc.m, gc.n, gc.k}];
  if (!slot) {
    slot = std::make_unique<GemmData>();
    slot->a = random_tensor({gc.m, gc.k}, 1000 + static_cast<uint64_t>(gc.m));
    slot->w = random_tensor({gc.n, gc.k}, 2000 + static_cast<uint64_t>(gc.n * 7 + gc.k));
    slot->c = Tensor::zeros({gc.m, gc.n}, DType::kF32);
    slot->c_check = Tensor::zeros({gc.m, gc.n}, DType::kF32);
  }
  return *slot;
}

#if TANDEM_HAVE_DNNL
void onednn_gemm(const GemmCase& gc, const float* a, const float* w, float* c) {
  const dnnl_status_t st =
      dnnl_sgemm('N', 'T', gc.m, gc.n, gc.k, 1.0f, a, gc.k, w, gc.k, 0.0f, c, gc.n);
  if (st != dnnl_success) throw Error(cat("dnnl_sgemm failed with status ", static_cast<int>(st)));
}
#endif
#if TANDEM_HAVE_OPENBLAS
void openblas_gemm(const GemmCase& gc, const float* a, const float* w, float* c) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(gc.m),
              static_cast<int>(gc.n), static_cast<int>(gc.k), 1.0f, a, static_cast<int>(gc.k), w,
              static_cast<int>(gc.k), 0.0f, c, static_cast<int>(gc.n));
}
#endif

// tandem's result against a library's (or the reference kernel's when no library is built in).
std::string check_tandem(const GemmCase& gc, GemmData& d) {
  ops::gemm(d.a, d.w, d.c, {.trans_b = true});
  const float* a = d.a.data<float>();
  const float* w = d.w.data<float>();
  float* ref = d.c_check.data<float>();
#if TANDEM_HAVE_DNNL
  onednn_gemm(gc, a, w, ref);
  const char* against = "oneDNN";
#elif TANDEM_HAVE_OPENBLAS
  openblas_gemm(gc, a, w, ref);
  const char* against = "OpenBLAS";
#else
  (void)a;
  (void)w;
  (void)ref;
  ops::cpu_reference_kernels().gemm(d.a, d.w, d.c_check, {.trans_b = true}, nullptr);
  const char* against = "the reference kernel";
#endif
  // Inputs are U(-1, 1): an element of C has magnitude ~sqrt(K / 9); reordered f32 sums differ by a
  // few ulps of that, a wrong kernel by O(1) of it.
  const Diff diff = max_diff(d.c.data<float>(), ref, gc.m * gc.n);
  return diff_message(diff, 1e-4, cat("tandem gemm ", gc.name(), " vs ", against));
}

void run_gemm(benchmark::State& state, const GemmCase& gc, const std::string& impl, int threads) {
  begin_run(threads, impl == "openblas");
  try {
    GemmData& d = gemm_data(gc);
    const float* a = d.a.data<float>();
    const float* w = d.w.data<float>();
    float* c = d.c.data<float>();
    if (impl == "tandem") {
      if (!verify_once(state, bench_name("gemm", gc.name(), threads, impl),
                       [&] { return check_tandem(gc, d); }))
        return;
      const ops::GemmParams p{.trans_b = true};
      for (auto _ : state) {
        ops::gemm(d.a, d.w, d.c, p);
        benchmark::DoNotOptimize(c);
        benchmark::ClobberMemory();
      }
#if TANDEM_HAVE_DNNL
    } else if (impl == "onednn") {
      for (auto _ : state) {
        onednn_gemm(gc, a, w, c);
        benchmark::DoNotOptimize(c);
        benchmark::ClobberMemory();
      }
#endif
#if TANDEM_HAVE_OPENBLAS
    } else if (impl == "openblas") {
      for (auto _ : state) {
        openblas_gemm(gc, a, w, c);
        benchmark::DoNotOptimize(c);
        benchmark::ClobberMemory();
      }
#endif
    }
    (void)a;  // unused when neither library is built in
    (void)w;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, gc.flops(), gc.bytes(), threads);
}

std::vector<GemmCase> gemm_cases() {
  std::vector<GemmCase> cases;
  // SmolLM2-135M: d 576; Q and O 576x576; K and V 3 heads x 64 = 192; FFN gate/up 1536, down back.
  for (int64_t m : {1, 128, 512}) {
    cases.push_back({"smollm2", "attn_q_o", m, 576, 576});
    cases.push_back({"smollm2", "attn_k_v", m, 192, 576});
    cases.push_back({"smollm2", "ffn_gate_up", m, 1536, 576});
    cases.push_back({"smollm2", "ffn_down", m, 576, 1536});
  }
  // LLaMA-7B: d 4096 (32 heads of 128, Q/K/V/O all 4096x4096), FFN 11008.
  for (int64_t m : {1, 128}) {
    cases.push_back({"llama7b", "attn_qkvo", m, 4096, 4096});
    cases.push_back({"llama7b", "ffn_gate_up", m, 11008, 4096});
    cases.push_back({"llama7b", "ffn_down", m, 4096, 11008});
  }
  return cases;
}

std::vector<std::string> gemm_impls() {
  std::vector<std::string> impls{"tandem"};
#if TANDEM_HAVE_DNNL
  impls.push_back("onednn");
#endif
#if TANDEM_HAVE_OPENBLAS
  impls.push_back("openblas");
#endif
  return impls;
}

}  // namespace

void register_gemm_benchmarks() {
  const MachineCeilings& mc = ceilings();
  for (const GemmCase& gc : gemm_cases()) {
    for (int t : thread_counts()) {
      // Skip shapes whose slowest library run (assumed at 40% of the FMA peak, the Haswell-pinned
      // OpenBLAS level) or whose memory traffic would take more than ~1 s per iteration here.
      const double est_s = std::max(gc.flops() / (0.4 * mc.fma_peak_flops(t)),
                                    gc.bytes() / std::max(mc.bandwidth(t), 1.0));
      if (est_s > 1.0) {
        std::fprintf(stderr,
                     "tandem_bench_kernels: skipping gemm %s at %d threads (~%.1f s/iter)\n",
                     gc.name().c_str(), t, est_s);
        continue;
      }
      for (const std::string& impl : gemm_impls()) {
        benchmark::RegisterBenchmark(
            bench_name("gemm", gc.name(), t, impl).c_str(),
            [gc, impl, t](benchmark::State& s) { run_gemm(s, gc, impl, t); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace tandem::bench
