// SPDX-License-Identifier: Apache-2.0
// parallel_for: the one OpenMP loop of the fast kernels. Runs body(i, thread) for i in [0, n) on up
// to `threads` OpenMP threads (dynamic schedule, one index at a time: callers pass coarse work
// items), with `thread` in [0, team) for per-thread scratch. An exception thrown by a body must not
// escape an OpenMP region, so the first one is kept, the remaining items are skipped and it is
// re-thrown after the loop.
//
//   std::vector<std::vector<float>> scratch(threads);
//   parallel_for(tiles, threads, [&](int64_t t, int th) { use(scratch[th], t); });
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>

namespace tandem::cpu {

template <class F>
void parallel_for(int64_t n, int threads, F&& body) {
  if (n <= 0) return;
  const int team = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n));
  if (team == 1) {
    for (int64_t i = 0; i < n; ++i) body(i, 0);
    return;
  }
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) {
    if (failed.load(std::memory_order_relaxed)) continue;
    try {
      body(i, omp_get_thread_num());
    } catch (...) {
#pragma omp critical(tandem_parallel_for_error)
      {
        if (!error) error = std::current_exception();
      }
      failed.store(true, std::memory_order_relaxed);
    }
  }
  if (error) std::rethrow_exception(error);
}

// Number of threads parallel_for will use for n items.
inline int team_size(int64_t n, int threads) {
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(std::max(threads, 1), n)));
}

}  // namespace tandem::cpu
