// SPDX-License-Identifier: Apache-2.0
// Profiler: FMA peak, memory bandwidth, GEMM FLOP/s and per-op latency tables of one device.
#include "tandem/core/profiler.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <latch>
#include <limits>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/graph.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TANDEM_PROFILER_X86 1
#endif

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;

void check_options(const ProfileOptions& opt) {
  if (opt.repeats < 1)
    throw InvalidArgument(cat("ProfileOptions.repeats must be >= 1, got ", opt.repeats));
  if (!(opt.min_time_s >= 0) || !std::isfinite(opt.min_time_s))
    throw InvalidArgument(cat("ProfileOptions.min_time_s must be >= 0, got ", opt.min_time_s));
  if (!(opt.max_measure_s >= 0) || !std::isfinite(opt.max_measure_s))
    throw InvalidArgument(
        cat("ProfileOptions.max_measure_s must be >= 0, got ", opt.max_measure_s));
  if (opt.threads < 0)
    throw InvalidArgument(cat("ProfileOptions.threads must be >= 0, got ", opt.threads));
  if (opt.bandwidth_array_bytes < 4096)
    throw InvalidArgument(cat("ProfileOptions.bandwidth_array_bytes must be >= 4096, got ",
                              opt.bandwidth_array_bytes));
}

int effective_threads(const ProfileOptions& opt) {
  return opt.threads > 0 ? opt.threads : cpu_num_threads();
}

void report(const ProfileOptions& opt, const std::string& line) {
  if (opt.progress) opt.progress(line);
}

// Sets cpu_num_threads() for the lifetime of the scope.
class CpuThreadsScope {
 public:
  explicit CpuThreadsScope(int n) : old_(cpu_num_threads()) {
    if (n > 0) set_cpu_num_threads(n);
  }
  ~CpuThreadsScope() { set_cpu_num_threads(old_); }
  CpuThreadsScope(const CpuThreadsScope&) = delete;
  CpuThreadsScope& operator=(const CpuThreadsScope&) = delete;

 private:
  int old_;
};

// Best seconds per call of `run` (followed by `sync`, which waits for the device): a warm-up call
// sizes a repetition to last min_time_s, then up to `repeats` repetitions within max_measure_s.
template <class Run, class Sync>
double best_seconds_per_call(const ProfileOptions& opt, Run&& run, Sync&& sync) {
  auto t0 = Clock::now();
  run();
  sync();
  const double first = std::max(seconds_since(t0), 1e-9);
  const int64_t calls = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(opt.min_time_s / first)),
                                            1, int64_t{1} << 24);
  double best = std::numeric_limits<double>::infinity();
  const auto start = Clock::now();
  for (int r = 0; r < opt.repeats; ++r) {
    t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) run();
    sync();
    best = std::min(best, seconds_since(t0) / static_cast<double>(calls));
    if (seconds_since(start) > opt.max_measure_s) break;
  }
  return best;
}

// ---- FMA loops: independent multiply-add chains kept in registers ----
// acc = acc * m + a converges to a / (1 - m) = 1, so values stay normal and bounded.

constexpr float kMul = 0.999999f, kAdd = 1e-6f;

#if defined(TANDEM_PROFILER_X86)
constexpr int kChains512 = 16;  // 16 of 32 zmm registers: enough to cover FMA latency on two ports
constexpr int kChains256 = 12;  // 12 of 16 ymm registers (two hold the constants)

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters) {
  __m512 acc[kChains512];
  for (int c = 0; c < kChains512; ++c)
    acc[c] = _mm512_set1_ps(0.5f + 0.01f * static_cast<float>(c));
  const __m512 m = _mm512_set1_ps(kMul), a = _mm512_set1_ps(kAdd);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains512; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains512; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters) {
  __m256 acc[kChains256];
  for (int c = 0; c < kChains256; ++c)
    acc[c] = _mm256_set1_ps(0.5f + 0.01f * static_cast<float>(c));
  const __m256 m = _mm256_set1_ps(kMul), a = _mm256_set1_ps(kAdd);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains256; ++c) acc[c] = _mm256_fmadd_ps(acc[c], m, a);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains256; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float s = 0;
  for (float v : lanes) s += v;
  return s;
}
#endif

constexpr int kChainsScalar = 8;

float fma_loop_scalar(int64_t iters) {
  float acc[kChainsScalar];
  for (int c = 0; c < kChainsScalar; ++c) acc[c] = 0.5f + 0.01f * static_cast<float>(c);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 8
    for (int c = 0; c < kChainsScalar; ++c) acc[c] = acc[c] * kMul + kAdd;
  }
  float s = 0;
  for (float v : acc) s += v;
  return s;
}

struct FmaVariant {
  const char* name;
  float (*loop)(int64_t);
  double flops_per_iter;
};

FmaVariant pick_fma_variant() {
#if defined(TANDEM_PROFILER_X86)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return {"avx512f", fma_loop_avx512, 2.0 * 16 * kChains512};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return {"avx2+fma", fma_loop_avx2, 2.0 * 8 * kChains256};
#endif
  return {"baseline", fma_loop_scalar, 2.0 * kChainsScalar};
}

// Keeps the loops' results observable so the compiler cannot drop them.
volatile float g_fma_sink = 0;

// ---- memory bandwidth ----

double cpu_triad_bandwidth(const ProfileOptions& opt) {
  const int threads = effective_threads(opt);
  const int64_t n = opt.bandwidth_array_bytes / static_cast<int64_t>(sizeof(double));
  Tensor ta = Tensor::empty({n}, DType::kI64), tb = Tensor::empty({n}, DType::kI64),
         tc = Tensor::empty({n}, DType::kI64);
  double* a = static_cast<double*>(ta.raw_data());
  double* b = static_cast<double*>(tb.raw_data());
  double* c = static_cast<double*>(tc.raw_data());
  // First touch with the same static schedule as the triad, so pages land near their threads.
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    a[i] = 0.0;
    b[i] = 1.0;
    c[i] = 2.0;
  }
  const double scalar = 3.0;
  auto triad = [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) a[i] = b[i] + scalar * c[i];
  };
  const double s = best_seconds_per_call(opt, triad, [] {});
  if (a[n / 2] != 7.0)
    throw DeviceError(cat("memory bandwidth triad produced ", a[n / 2], ", expected 7"));
  return 3.0 * static_cast<double>(n) * sizeof(double) / s;
}

double device_copy_bandwidth(Device device, const ProfileOptions& opt) {
  Backend& backend = BackendRegistry::global().get(device);
  const int64_t n = opt.bandwidth_array_bytes / 4;
  Tensor src = Tensor::zeros({n}, DType::kF32, device),
         dst = Tensor::empty({n}, DType::kF32, device);
  const double s = best_seconds_per_call(
      opt, [&] { dst.copy_from(src); }, [&] { backend.synchronize(device.index); });
  return 2.0 * static_cast<double>(n) * 4.0 / s;
}

// ---- op timing ----

// f32 tensor on `device` filled with smooth values in [-1, 1].
Tensor filled(const Shape& shape, Device device, float phase) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    p[i] = std::sin(0.37f * static_cast<float>(i) + phase);
  return device.is_cpu() ? t : t.to(device);
}

class OpTimer {
 public:
  OpTimer(Device device, const ProfileOptions& opt)
      : device_(device), opt_(opt), backend_(BackendRegistry::global().get(device)) {}

  template <class Run>
  double seconds(Run&& run) {
    return best_seconds_per_call(opt_, run, [&] { backend_.synchronize(device_.index); });
  }

  double gemm_s(int64_t m, int64_t n, int64_t k) {
    Tensor a = filled({m, k}, device_, 0.1f), b = filled({k, n}, device_, 0.2f);
    Tensor c = Tensor::empty({m, n}, DType::kF32, device_);
    return seconds([&] { ops::gemm(a, b, c); });
  }
  double norm_s(int64_t rows, int64_t dim) {
    Tensor x = filled({rows, dim}, device_, 0.3f), w = filled({dim}, device_, 0.4f);
    Tensor y = Tensor::empty({rows, dim}, DType::kF32, device_);
    return seconds([&] { ops::rms_norm(x, w, y); });
  }
  double softmax_s(int64_t rows, int64_t cols) {
    Tensor x = filled({rows, cols}, device_, 0.5f);
    Tensor y = Tensor::empty({rows, cols}, DType::kF32, device_);
    return seconds([&] { ops::softmax(x, y); });
  }
  double attention_s(const AttentionDims& d) {
    const int64_t dv = d.v_head_dim > 0 ? d.v_head_dim : d.head_dim;
    Tensor q = filled({d.tq, d.hq, d.head_dim}, device_, 0.6f);
    Tensor k = filled({d.tk, d.hkv, d.head_dim}, device_, 0.7f);
    Tensor v = filled({d.tk, d.hkv, dv}, device_, 0.8f);
    Tensor out = Tensor::empty({d.tq, d.hq, dv}, DType::kF32, device_);
    ops::AttentionParams p;
    p.causal = d.causal;
    return seconds([&] { ops::attention(q, k, v, out, p); });
  }

 private:
  Device device_;
  const ProfileOptions& opt_;
  Backend& backend_;
};

std::string gflops_text(double flops_per_s) {
  return cat(std::round(flops_per_s / 1e7) / 100, " GFLOP/s");
}

}  // namespace

std::string cpu_fma_variant() { return pick_fma_variant().name; }

double measure_cpu_fma_peak_flops(int threads, const ProfileOptions& opt) {
  check_options(opt);
  if (threads < 1) threads = effective_threads(opt);
  const FmaVariant v = pick_fma_variant();
  // Size one repetition to last about min_time_s on one thread.
  int64_t iters = 1 << 12;
  double elapsed = 0;
  for (;;) {
    const auto t0 = Clock::now();
    g_fma_sink = g_fma_sink + v.loop(iters);
    elapsed = seconds_since(t0);
    if (elapsed >= std::max(opt.min_time_s / 4, 1e-4) || iters >= (int64_t{1} << 40)) break;
    iters *= 2;
  }
  iters = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iters) *
                                                    std::max(opt.min_time_s, 1e-4) / elapsed));
  double best = 0;
  const auto start = Clock::now();
  for (int r = 0; r < opt.repeats; ++r) {
    std::latch ready(threads + 1);
    std::vector<float> results(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    pool.reserve(static_cast<size_t>(threads));
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        ready.arrive_and_wait();
        results[static_cast<size_t>(t)] = v.loop(iters);
      });
    ready.arrive_and_wait();
    const auto t0 = Clock::now();
    for (auto& th : pool) th.join();
    const double s = seconds_since(t0);
    for (float x : results) g_fma_sink = g_fma_sink + x;
    best = std::max(best, v.flops_per_iter * static_cast<double>(iters) * threads / s);
    if (seconds_since(start) > opt.max_measure_s) break;
  }
  return best;
}

double measure_memory_bandwidth_bytes_per_s(Device device, const ProfileOptions& opt) {
  check_options(opt);
  if (device.is_cpu()) return cpu_triad_bandwidth(opt);
  return device_copy_bandwidth(device, opt);
}

double measure_gemm_flops(Device device, int64_t m, int64_t n, int64_t k,
                          const ProfileOptions& opt) {
  check_options(opt);
  if (m <= 0 || n <= 0 || k <= 0)
    throw InvalidArgument(
        cat("measure_gemm_flops: sizes must be positive, got ", m, "x", n, "x", k));
  CpuThreadsScope threads(device.is_cpu() ? effective_threads(opt) : 0);
  OpTimer timer(device, opt);
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
         timer.gemm_s(m, n, k);
}

DeviceProfile profile_device(Device device, const ProfileOptions& opt) {
  check_options(opt);
  if (opt.gemm_sizes.empty()) throw InvalidArgument("ProfileOptions.gemm_sizes is empty");
  Backend& backend = BackendRegistry::global().get(device);
  const DeviceInfo info = backend.device_info(device.index);
  const int threads = device.is_cpu() ? effective_threads(opt) : 1;
  CpuThreadsScope scope(device.is_cpu() ? threads : 0);

  DeviceProfile p;
  p.name = info.name;
  p.kind = std::string(device_type_name(device.type));
  p.mem_bytes = static_cast<double>(info.memory_bytes);
  p.threads = threads;
  OpTimer timer(device, opt);

  for (int64_t s : opt.gemm_sizes) {
    const double t = timer.gemm_s(s, s, s);
    const double flops =
        2.0 * static_cast<double>(s) * static_cast<double>(s) * static_cast<double>(s) / t;
    p.peak_flops = std::max(p.peak_flops, flops);
    if (opt.op_tables) p.op_latency_s[op_key(make_gemm_node("g", s, s, s))] = t;
    report(opt, cat("gemm ", s, "x", s, "x", s, ": ", gflops_text(flops)));
  }
  p.mem_bandwidth_bytes_per_s = measure_memory_bandwidth_bytes_per_s(device, opt);
  report(opt,
         cat("memory bandwidth: ", std::round(p.mem_bandwidth_bytes_per_s / 1e7) / 100, " GB/s"));
  p.description = cat("measured by tandem profile on ", info.name, " (", info.features,
                      "); peak_flops: best f32 ", "GEMM of sizes");
  for (int64_t s : opt.gemm_sizes) p.description += cat(" ", s);
  p.description += device.is_cpu()
                       ? cat("; bandwidth: triad over 3 x ", opt.bandwidth_array_bytes >> 20,
                             " MiB, write-allocate not counted")
                       : "; bandwidth: device-to-device copy (read + write)";

  if (opt.op_tables) {
    // A 576-wide LLaMA layer (SmolLM2-135M): decode and prefill GEMMs, norms, softmax, attention.
    const int64_t gemm_shapes[][3] = {
        {1, 576, 576}, {16, 576, 576}, {128, 576, 576}, {128, 1536, 576}};
    for (const auto& g : gemm_shapes) {
      const double t = timer.gemm_s(g[0], g[1], g[2]);
      const std::string key = op_key(make_gemm_node("g", g[0], g[1], g[2]));
      p.op_latency_s[key] = t;
      report(opt, cat(key, ": ", t * 1e6, " us"));
    }
    for (const auto& [rows, dim] : {std::pair<int64_t, int64_t>{1, 576}, {128, 576}}) {
      const double t = timer.norm_s(rows, dim);
      const std::string key = op_key(make_norm_node("n", "rms_norm", Shape{rows, dim}));
      p.op_latency_s[key] = t;
      report(opt, cat(key, ": ", t * 1e6, " us"));
    }
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{9, 512}, {128, 1024}}) {
      const double t = timer.softmax_s(rows, cols);
      const std::string key = op_key(make_softmax_node("s", Shape{rows, cols}));
      p.op_latency_s[key] = t;
      report(opt, cat(key, ": ", t * 1e6, " us"));
    }
    for (const auto& [tq, tk] : {std::pair<int64_t, int64_t>{1, 512}, {128, 128}, {128, 512}}) {
      AttentionDims d;
      d.tq = tq;
      d.tk = tk;
      d.hq = 9;
      d.hkv = 3;
      d.head_dim = 64;
      const double t = timer.attention_s(d);
      const std::string key = op_key(make_attention_node("a", d));
      p.op_latency_s[key] = t;
      report(opt, cat(key, ": ", t * 1e6, " us"));
    }
  }
  return p;
}

}  // namespace tandem
