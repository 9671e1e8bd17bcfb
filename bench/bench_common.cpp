// SPDX-License-Identifier: Apache-2.0
#include "bench_common.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"
#include "tandem/llm/synthetic_model.h"
#include "tandem/ops/ops.h"

#if TANDEM_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tandem::bench {

MachineCeilings& ceilings() {
  static MachineCeilings c;
  return c;
}

std::vector<int> thread_counts() {
  const int n = ceilings().threads;
  if (n <= 1) return {1};
  return {1, n};
}

namespace {
bool g_openblas_polling = false;  // the last call was a multi-threaded OpenBLAS loop
}  // namespace

void begin_run(int threads, bool is_openblas) {
  if (!is_openblas && g_openblas_polling) {
    std::this_thread::sleep_for(std::chrono::milliseconds(120));
  }
  g_openblas_polling = is_openblas && threads > 1;
  set_cpu_num_threads(threads);
  omp_set_num_threads(threads);
#if TANDEM_HAVE_OPENBLAS
  openblas_set_num_threads(threads);
#endif
}

void fill_uniform(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  // splitmix64: fast, deterministic, good enough for benchmark inputs.
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
  const float span = hi - lo;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    p[i] = lo + span * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
}

Tensor random_tensor(const Shape& shape, uint64_t seed, float lo, float hi) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  fill_uniform(t.data<float>(), t.numel(), seed, lo, hi);
  return t;
}

// K-quants have no quantizer (read-only weight formats): random code bytes with small finite
// super-block scales, as a GGUF file would hold.
Tensor random_weight(int64_t rows, int64_t cols, DType dtype, uint64_t seed) {
  if (dtype_is_k_quant(dtype)) return llm::random_kquant({rows, cols}, dtype, 1.0f, seed);
  Tensor f = random_tensor({rows, cols}, seed);
  if (dtype == DType::kF32) return f;
  Tensor w = Tensor::empty({rows, cols}, dtype);
  ops::convert(f, w);
  return w;
}

CopySet make_copies(const Tensor& one, int64_t copies) {
  Shape shape = one.shape();
  const int64_t rows = shape[0];
  shape[0] = rows * copies;
  CopySet s;
  s.all = Tensor::empty(shape, one.dtype());
  const auto bytes = static_cast<size_t>(one.nbytes());
  auto* base = static_cast<char*>(s.all.raw_data());
  for (int64_t i = 0; i < copies; ++i) {
    std::memcpy(base + static_cast<size_t>(i) * bytes, one.raw_data(), bytes);
    s.views.push_back(s.all.slice(0, i * rows, (i + 1) * rows));
  }
  return s;
}

int64_t copies_for(int64_t bytes_per_copy, bool stream) {
  if (!stream) return 1;
  return std::max<int64_t>(1, (kStreamBytes + bytes_per_copy - 1) / bytes_per_copy);
}

DataCache& data_cache() {
  static DataCache c(int64_t{1} << 30);
  return c;
}

std::string bench_name(const std::string& kind, const std::string& case_name, int threads,
                       const std::string& impl) {
  return kind + "/" + case_name + "/t" + std::to_string(threads) + "/" + impl;
}

void set_counters(benchmark::State& state, double flops, double bytes, int threads) {
  using benchmark::Counter;
  const double iters = static_cast<double>(state.iterations());
  const MachineCeilings& c = ceilings();
  if (flops > 0) {
    state.counters["gflops"] = Counter(flops * iters * 1e-9, Counter::kIsRate);
    const double peak = c.fma_peak_flops(threads);
    if (peak > 0) state.counters["peak_share"] = Counter(flops * iters / peak, Counter::kIsRate);
    state.counters["flop_per_iter"] = Counter(flops);
  }
  if (bytes > 0) {
    state.counters["gbytes"] = Counter(bytes * iters * 1e-9, Counter::kIsRate);
    const double bw = c.bandwidth(threads);
    if (bw > 0) state.counters["bw_share"] = Counter(bytes * iters / bw, Counter::kIsRate);
    state.counters["byte_per_iter"] = Counter(bytes);
  }
}

namespace {
std::map<std::string, std::string>& verifications() {
  static std::map<std::string, std::string> m;
  return m;
}
}  // namespace

const std::string* verification_result(const std::string& name) {
  auto it = verifications().find(name);
  return it == verifications().end() ? nullptr : &it->second;
}

void record_verification(const std::string& name, const std::string& error) {
  verifications()[name] = error;
}

Diff max_diff(const float* a, const float* b, int64_t n) {
  Diff d;
  for (int64_t i = 0; i < n; ++i) {
    const double diff = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    // NaN never compares greater: make it count as an infinite error.
    d.max_abs = std::isnan(diff) ? INFINITY : std::max(d.max_abs, diff);
    d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(b[i])));
  }
  return d;
}

std::string diff_message(const Diff& d, double tol, const std::string& what) {
  if (d.rel() <= tol) return {};
  return what + ": max |diff| " + std::to_string(d.max_abs) + " is " + std::to_string(d.rel()) +
         " of max |ref| " + std::to_string(d.max_ref) + " (tolerance " + std::to_string(tol) + ")";
}

}  // namespace tandem::bench
