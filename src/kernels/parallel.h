// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels). parallel_for: the one OpenMP loop of the CPU kernels (the backend's
// and the engines' own), and parallel_threads: the one rule for how many threads a kernel of a
// given size may use.
//
// parallel_for runs body(i, thread) for i in [0, n) on up to `threads` OpenMP threads (dynamic
// schedule, one index at a time: callers pass coarse work items), with `thread` in [0, team) for
// per-thread scratch. An exception thrown by a body must not escape an OpenMP region, so the first
// one is kept, the remaining items are skipped and it is re-thrown after the loop.
//
// Small work stays on the calling thread. Starting an OpenMP team costs a few microseconds on idle
// cores, but on cores shared with other processes a worker may only run after the scheduler's next
// slice (measured: a 2-thread GEMV of 0.1 ms took ~7 ms under load, 2 threads on 2 busy cores).
// So every kernel asks parallel_threads(work) first: one thread below kMinParallelMacs
// multiply-adds (or elementwise operations) and kMinParallelBytes bytes touched, and beyond that at
// most one thread per such amount of work.
//
//   const int t = parallel_threads(m * n * k, bytes, cpu_num_threads());
//   parallel_for_static(rows, t, [&](int64_t r, int) { row(r); });   // even items, static split
//   std::vector<std::vector<float>> scratch(team_size(tiles, t));
//   parallel_for(tiles, t, [&](int64_t i, int th) { use(scratch[th], i); });
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

namespace tandem::cpu {

// Work per thread below which a kernel does not start (another) thread: 64 Ki multiply-adds (or
// elementwise operations), or 256 KiB of memory read + written. Either amount takes ~5-20 us on
// one core here, about the cost of waking a parked OpenMP worker.
inline constexpr int64_t kMinParallelMacs = int64_t{64} << 10;
inline constexpr int64_t kMinParallelBytes = int64_t{256} << 10;

// Threads for a kernel doing `macs` multiply-adds (or elementwise operations) over `bytes` bytes,
// given `threads` available: 1 for small work, else at most one per kMinParallelMacs /
// kMinParallelBytes (whichever allows more), never more than `threads`.
inline int parallel_threads(int64_t macs, int64_t bytes, int threads) {
  const int64_t by_work =
      std::max(macs / kMinParallelMacs, bytes / kMinParallelBytes);  // 0 for small work
  return static_cast<int>(std::clamp<int64_t>(by_work, 1, std::max(threads, 1)));
}

// The first exception thrown inside an OpenMP region, re-thrown after it.
class FirstError {
 public:
  void keep() {
#pragma omp critical(tandem_parallel_for_error)
    {
      if (!error_) error_ = std::current_exception();
    }
    failed_.store(true, std::memory_order_relaxed);
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
};

// Number of threads parallel_for will use for n items.
inline int team_size(int64_t n, int threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(std::max(threads, 1), n)));
}

// The team for n items on up to `threads` threads; when that is one thread (or no items), runs
// the loop on the calling thread and returns 0.
template <class F>
int team_or_run_here(int64_t n, int threads, F& body) {
  if (n <= 0) return 0;
  const int team = team_size(n, threads);
  if (team > 1) return team;
  for (int64_t i = 0; i < n; ++i) body(i, 0);
  return 0;
}

template <class F>
void parallel_for(int64_t n, int threads, F&& body) {
  const int team = team_or_run_here(n, threads, body);
  if (team == 0) return;
  FirstError error;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    if (error.failed()) continue;
    try {
      body(i, omp_get_thread_num());
    } catch (...) {
      error.keep();
    }
  }
  error.rethrow();
}

// The same with a static split: thread t of the team runs the contiguous items
// [n t / team, n (t + 1) / team) in order. For many small, even items (rows, planes), where
// handing them out one at a time would cost more than the work. Exceptions as parallel_for.
template <class F>
void parallel_for_static(int64_t n, int threads, F&& body) {
  const int team = team_or_run_here(n, threads, body);
  if (team == 0) return;
  FirstError error;
#pragma omp parallel num_threads(team)
  {
    const int t = omp_get_thread_num(), k = omp_get_num_threads();
    try {
      for (int64_t i = n * t / k, end = n * (t + 1) / k; i < end; ++i) body(i, t);
    } catch (...) {
      error.keep();
    }
  }
  error.rethrow();
}

}  // namespace tandem::cpu
