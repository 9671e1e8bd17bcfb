// SPDX-License-Identifier: Apache-2.0
// Memory-bound kernels, reported in GB/s of bytes read + written against the measured triad
// bandwidth:
//   rms_norm, softmax   f32 rows, out of place
//   gemv                ops::gemm with M = 1 and q4_0/q4_1/q8_0/f16 weights [N, K] (trans_b),
//                       dequantized on the fly: the decode step of an LLM; and ops::gemm_group
//                       of a layer's q/k/v and gate/up against one ops::gemm per weight
// Each case runs "hot" (one set of buffers, cache-resident after the first call) and "stream" (the
// iterations cycle over copies of the buffers spanning kStreamBytes, far past the caches, as a
// decode step streams every layer's weights from DRAM). Only the stream numbers are comparable to
// the triad.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "bench_common.h"
#include "tandem/ops/ops.h"

namespace tandem::bench {
namespace {

// ---- rms_norm and softmax
// ---------------------------------------------------------------------------

struct RowCase {
  std::string op;    // "rms_norm" | "softmax"
  std::string what;  // "smollm2.prefill" ...
  int64_t rows, cols;
  bool stream;
  std::string name() const {
    return what + ".r" + std::to_string(rows) + "_c" + std::to_string(cols) +
           (stream ? ".stream" : ".hot");
  }
  double bytes() const {
    return 8.0 * static_cast<double>(rows * cols) + (op == "rms_norm" ? 4.0 * cols : 0.0);
  }
};

struct RowData {
  CopySet x, y;
  Tensor weight;
};

void run_rows(benchmark::State& state, const RowCase& rc, int threads) {
  begin_run(threads, false);
  try {
    // x and y copies share the stream budget.
    const int64_t copies = copies_for(2 * 4 * rc.rows * rc.cols, rc.stream);
    auto data =
        data_cache().get<RowData>(rc.op + rc.name(), 2 * 4 * rc.rows * rc.cols * copies, [&] {
          auto d = std::make_shared<RowData>();
          const bool sm = rc.op == "softmax";
          const Tensor x0 = random_tensor({rc.rows, rc.cols}, 7000 + static_cast<uint64_t>(rc.cols),
                                          sm ? -8.0f : -1.0f, sm ? 8.0f : 1.0f);
          d->x = make_copies(x0, copies);
          d->y = make_copies(Tensor::zeros({rc.rows, rc.cols}, DType::kF32), copies);
          d->weight = random_tensor({rc.cols}, 7100, 0.5f, 1.5f);
          return d;
        });
    RowData& d = *data;
    const ops::NormParams np{.eps = 1e-5f};
    auto op = [&](int64_t i) {
      if (rc.op == "rms_norm") {
        ops::rms_norm(d.x.views[i], d.weight, d.y.views[i], np);
      } else {
        ops::softmax(d.x.views[i], d.y.views[i]);
      }
    };
    const bool ok = verify_once(state, bench_name(rc.op, rc.name(), threads, "tandem"), [&] {
      op(0);
      Tensor ref = Tensor::empty({rc.rows, rc.cols}, DType::kF32);
      if (rc.op == "rms_norm") {
        ops::cpu_reference_kernels().rms_norm(d.x.views[0], d.weight, ref, np, nullptr);
      } else {
        ops::cpu_reference_kernels().softmax(d.x.views[0], ref, nullptr);
      }
      const Diff diff = max_diff(d.y.views[0].data<float>(), ref.data<float>(), ref.numel());
      return diff_message(diff, 1e-4, cat("tandem ", rc.op, " ", rc.name(), " vs reference"));
    });
    if (!ok) return;
    int64_t i = 0;
    for (auto _ : state) {
      op(i);
      if (++i == copies) i = 0;
      benchmark::ClobberMemory();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, 0, rc.bytes(), threads);
}

// ---- dequantizing GEMV
// ------------------------------------------------------------------------------

struct GemvCase {
  std::string what;  // "smollm2.ffn_up" ...
  int64_t n, k;      // weight [N, K]
  DType dtype;
  bool stream;
  bool int8 = false;  // int8 activations (the decode default, ops::GemmParams::int8_activations)
  // Non-empty: W is this many weights of these row counts (summing to n), as a decoder layer's
  // q/k/v or gate/up, run as one ops::gemm_group (`grouped`) or one ops::gemm each.
  std::vector<int64_t> parts = {};
  bool grouped = false;
  std::string name() const {
    return what + ".n" + std::to_string(n) + "_k" + std::to_string(k) + "." +
           std::string(dtype_name(dtype)) + (int8 ? ".x8" : "") +
           (parts.empty() ? "" : (grouped ? ".group" : ".separate")) +
           (stream ? ".stream" : ".hot");
  }
  double weight_bytes() const { return static_cast<double>(dtype_row_bytes(dtype, k) * n); }
  double bytes() const { return weight_bytes() + 4.0 * static_cast<double>(k + n); }
  double flops() const { return 2.0 * static_cast<double>(n) * static_cast<double>(k); }
};

void run_gemv(benchmark::State& state, const GemvCase& gc, int threads) {
  begin_run(threads, false);
  try {
    const auto wbytes = static_cast<int64_t>(gc.weight_bytes());
    const int64_t copies = copies_for(wbytes, gc.stream);
    auto wset = data_cache().get<CopySet>(gc.name(), wbytes * copies, [&] {
      const Tensor w0 =
          random_weight(gc.n, gc.k, gc.dtype, 8000 + static_cast<uint64_t>(gc.n + gc.k));
      return std::make_shared<CopySet>(make_copies(w0, copies));
    });
    const CopySet& w = *wset;
    const Tensor x = random_tensor({1, gc.k}, 8100);
    Tensor y = Tensor::zeros({1, gc.n}, DType::kF32);
    const ops::GemmParams p{.trans_b = true, .int8_activations = gc.int8};
    // A group: each copy's weight split into its parts' row ranges, one output per part.
    const std::vector<int64_t> sizes = gc.parts.empty() ? std::vector<int64_t>{gc.n} : gc.parts;
    std::vector<std::vector<Tensor>> part_w(static_cast<size_t>(copies));
    std::vector<Tensor> part_y;
    for (int64_t r0 = 0; int64_t r : sizes) {
      for (int64_t i = 0; i < copies; ++i) part_w[i].push_back(w.views[i].slice(0, r0, r0 + r));
      part_y.push_back(Tensor::zeros({1, r}, DType::kF32));
      r0 += r;
    }
    auto run = [&](int64_t i) {
      if (gc.parts.empty()) return ops::gemm(x, w.views[i], y, p);
      if (gc.grouped) return ops::gemm_group(x, part_w[i], part_y, p);
      for (size_t j = 0; j < sizes.size(); ++j) ops::gemm(x, part_w[i][j], part_y[j], p);
    };
    const bool ok = verify_once(state, bench_name("gemv", gc.name(), threads, "tandem"), [&] {
      run(0);
      int64_t r0 = 0;
      for (size_t j = 0; j < part_y.size() && !gc.parts.empty(); r0 += sizes[j++]) {
        std::memcpy(y.data<float>() + r0, part_y[j].data<float>(),
                    static_cast<size_t>(4 * sizes[j]));
      }
      Tensor ref = Tensor::zeros({1, gc.n}, DType::kF32);
      ops::cpu_reference_kernels().gemm(x, w.views[0], ref, p, nullptr);
      const Diff diff = max_diff(y.data<float>(), ref.data<float>(), gc.n);
      // A fast path may quantize the activations too (as llama.cpp does for 4/8-bit dot products):
      // allow that rounding, not a wrong kernel.
      const double tol = gc.dtype == DType::kF16 ? 1e-3 : 2e-2;
      return diff_message(diff, tol, cat("tandem gemv ", gc.name(), " vs reference"));
    });
    if (!ok) return;
    int64_t i = 0;
    for (auto _ : state) {
      run(i);
      if (++i == copies) i = 0;
      benchmark::ClobberMemory();
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_counters(state, gc.flops(), gc.bytes(), threads);
}

template <class Case, class Run>
void register_case(const std::string& kind, const Case& c, Run run) {
  for (int t : thread_counts()) {
    benchmark::RegisterBenchmark(bench_name(kind, c.name(), t, "tandem").c_str(),
                                 [c, t, run](benchmark::State& s) { run(s, c, t); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace

void register_memory_benchmarks() {
  for (bool stream : {false, true}) {
    // SmolLM2 prefill of 512 tokens (d 576) and a large 4096-wide activation block.
    register_case("rms_norm", RowCase{"rms_norm", "smollm2.prefill", 512, 576, stream}, run_rows);
    register_case("rms_norm", RowCase{"rms_norm", "wide", 1024, 4096, stream}, run_rows);
    // Attention scores of SmolLM2 prefill (9 heads x 512 queries x 512 keys) and long rows.
    register_case("softmax", RowCase{"softmax", "smollm2.scores", 9 * 512, 512, stream}, run_rows);
    register_case("softmax", RowCase{"softmax", "wide", 1024, 4096, stream}, run_rows);
  }
  for (bool stream : {false, true}) {
    for (DType dt : {DType::kQ4_1, DType::kQ8_0, DType::kF16}) {
      register_case("gemv", GemvCase{"smollm2.ffn_up", 1536, 576, dt, stream}, run_gemv);
      register_case("gemv", GemvCase{"smollm2.ffn_down", 576, 1536, dt, stream}, run_gemv);
    }
    for (DType dt : {DType::kQ4_1, DType::kQ8_0}) {  // as decode runs them (int8 activations)
      register_case("gemv", GemvCase{"smollm2.attn_q", 576, 576, dt, stream, true}, run_gemv);
      register_case("gemv", GemvCase{"smollm2.ffn_up", 1536, 576, dt, stream, true}, run_gemv);
      register_case("gemv", GemvCase{"smollm2.ffn_down", 576, 1536, dt, stream, true}, run_gemv);
    }
    for (bool grouped : {false, true}) {  // a layer's q/k/v and gate/up, one pass or one each
      register_case(
          "gemv",
          GemvCase{"smollm2.qkv", 960, 576, DType::kQ4_1, stream, true, {576, 192, 192}, grouped},
          run_gemv);
      register_case(
          "gemv",
          GemvCase{"smollm2.gate_up", 3072, 576, DType::kQ4_1, stream, true, {1536, 1536}, grouped},
          run_gemv);
    }
    register_case("gemv", GemvCase{"smollm2.head", 49152, 576, DType::kQ8_0, stream, true},
                  run_gemv);
    for (DType dt : {DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {  // a Q4_K_M 7B's mix
      register_case("gemv", GemvCase{"llama7b.attn", 4096, 4096, dt, stream, true}, run_gemv);
    }
    for (DType dt : {DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ6_K}) {
      register_case("gemv", GemvCase{"llama7b.attn", 4096, 4096, dt, stream}, run_gemv);
    }
  }
}

}  // namespace tandem::bench
