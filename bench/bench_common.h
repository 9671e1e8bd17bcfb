// SPDX-License-Identifier: Apache-2.0
// Shared pieces of tandem_bench_kernels: the machine's measured ceilings, thread control for every
// library in the run, random inputs, benchmark naming, counters and one-time correctness checks.
//
// Every benchmark is named "<kind>/<case>/t<threads>/<impl>" (e.g.
// "gemm/smollm2.ffn_up.m128/t2/onednn"), so the summary table and scripts/bench_report.py pair the
// implementations of one case by name. Rates are computed on wall time (UseRealTime), since the
// libraries run worker threads.
//
// Thread-safety: benchmarks run one at a time on the main thread; nothing here is used
// concurrently.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::bench {

// Ceilings measured once at start-up in this process by the library's profiler (profiler.h).
struct MachineCeilings {
  int threads = 1;                      // N: the thread count of the multi-threaded runs
  double fma_peak_1t_flops = 0;         // f32 FMA peak, one thread
  double fma_peak_nt_flops = 0;         // f32 FMA peak, N threads at once
  double bandwidth_bytes_per_s = 0;     // STREAM-like triad, N threads
  double bandwidth_1t_bytes_per_s = 0;  // STREAM-like triad, one thread
  double fma_peak_flops(int t) const { return t <= 1 ? fma_peak_1t_flops : fma_peak_nt_flops; }
  double bandwidth(int t) const {
    return t <= 1 ? bandwidth_1t_bytes_per_s : bandwidth_bytes_per_s;
  }
};
MachineCeilings& ceilings();

// Thread counts to run compute-bound cases with: {1, N}, or {1} on a one-thread machine.
std::vector<int> thread_counts();

// Call first in every benchmark function. Sets the thread count of tandem's CPU kernels, OpenMP
// (oneDNN) and OpenBLAS at once. OpenBLAS's idle workers poll for about 2^28 cycles (~0.1 s) after
// a multi-threaded call and would steal cores from whatever runs next: when the previous call was
// such an OpenBLAS loop and this one is not OpenBLAS, waits for them to park (outside the timed
// region).
void begin_run(int threads, bool is_openblas);

// Fills with uniform values in [lo, hi) from a fixed seed (deterministic across runs).
void fill_uniform(float* p, int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
Tensor random_tensor(const Shape& shape, uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// f32 [rows, cols] random tensor converted to dtype with ops::convert (q4_1, q8_0, f16, ...).
Tensor random_weight(int64_t rows, int64_t cols, DType dtype, uint64_t seed);

// Working set of the "stream" cases: past this machine's caches (its triad bandwidth falls to DRAM
// speed from ~192 MiB on), small enough to keep a few cases cached between calls.
inline constexpr int64_t kStreamBytes = int64_t{256} << 20;

// `copies` identical tensors stored back to back along dim 0, with a view of each: iterating over
// the views streams memory from DRAM instead of re-reading a cache-resident copy.
struct CopySet {
  Tensor all;
  std::vector<Tensor> views;
};
// Copies of the contiguous tensor `one`; the bytes are identical, the addresses distinct.
CopySet make_copies(const Tensor& one, int64_t copies);
// 1 when !stream, else enough copies of bytes_per_copy to span kStreamBytes.
int64_t copies_for(int64_t bytes_per_copy, bool stream);

// Keeps the most recently used inputs of benchmarks (Google Benchmark calls a benchmark function
// several times, and random interleaving alternates cases) up to a byte budget; older entries are
// dropped.
class DataCache {
 public:
  explicit DataCache(int64_t budget_bytes) : budget_(budget_bytes) {}
  // The entry for key, built with make() (returning std::shared_ptr<T>) when absent. `bytes` is its
  // size for the budget.
  template <class T, class F>
  std::shared_ptr<T> get(const std::string& key, int64_t bytes, F&& make) {
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return std::static_pointer_cast<T>(entries_.front().value);
      }
    }
    while (!entries_.empty() && used_ + bytes > budget_) {
      used_ -= entries_.back().bytes;
      entries_.pop_back();
    }
    std::shared_ptr<T> value = make();
    entries_.push_front({key, value, bytes});
    used_ += bytes;
    return value;
  }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<void> value;
    int64_t bytes;
  };
  int64_t budget_;
  int64_t used_ = 0;
  std::list<Entry> entries_;
};
// The process-wide cache (1 GiB) of the memory-bound and attention benchmarks' inputs.
DataCache& data_cache();

std::string bench_name(const std::string& kind, const std::string& case_name, int threads,
                       const std::string& impl);

// Per-iteration work of a case; sets the rate counters after the timed loop:
//   gflops      GFLOP/s              (when flops > 0)
//   peak_share  achieved / FMA peak of `threads` threads
//   gbytes      GB/s of bytes read + written (when bytes > 0)
//   bw_share    achieved / measured triad bandwidth
// plus the constants flop_per_iter and byte_per_iter for the post-processor.
void set_counters(benchmark::State& state, double flops, double bytes, int threads);

// Runs `check` once per benchmark `name` (bench_name()) in this process (Google Benchmark calls a
// benchmark function several times); `check` returns an empty string when the result is right, else
// what is wrong, which becomes SkipWithError on this and every later call. Returns false when the
// benchmark was failed (the caller returns before its timed loop).
template <class F>
bool verify_once(benchmark::State& state, const std::string& name, F&& check);
// The recorded check result of a benchmark ("" = passed), or nullptr when not checked yet.
const std::string* verification_result(const std::string& name);
void record_verification(const std::string& name, const std::string& error);

// max |a - b| and max |b| over n values.
struct Diff {
  double max_abs = 0;
  double max_ref = 0;
  double rel() const { return max_abs / (max_ref > 0 ? max_ref : 1.0); }
};
Diff max_diff(const float* a, const float* b, int64_t n);
// "" when rel() <= tol, else a message naming `what`.
std::string diff_message(const Diff& d, double tol, const std::string& what);

template <class F>
bool verify_once(benchmark::State& state, const std::string& name, F&& check) {
  const std::string* known = verification_result(name);
  const std::string error = known ? *known : check();
  if (!known) record_verification(name, error);
  if (!error.empty()) {
    state.SkipWithError(error.c_str());
    return false;
  }
  return true;
}

// Registration functions, one per file.
void register_gemm_benchmarks();
void register_conv_benchmarks();
void register_memory_benchmarks();
void register_attention_benchmarks();
void register_cnn_channel_benchmarks();

}  // namespace tandem::bench
