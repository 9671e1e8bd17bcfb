// SPDX-License-Identifier: Apache-2.0
// The CPU kernels' threading rule (backends/cpu/fast/parallel.h): small work stays on the calling
// thread, larger work gets at most one thread per threshold amount, never more than allowed; and
// parallel_for runs every item exactly once and passes exceptions on.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "kernels/parallel.h"

namespace tandem::cpu {
namespace {

TEST(CpuParallel, SmallWorkStaysOnOneThread) {
  EXPECT_EQ(parallel_threads(0, 0, 8), 1);
  EXPECT_EQ(parallel_threads(kMinParallelMacs - 1, kMinParallelBytes - 1, 8), 1);
  // A 576-wide RMSNorm row; a 192x576 q4_1 GEMV (110 K multiply-adds, 69 KiB: one threshold's
  // worth of work, so still one thread).
  EXPECT_EQ(parallel_threads(576, 8 * 576, 2), 1);
  EXPECT_EQ(parallel_threads(192 * 576, 192 * 360, 2), 1);
}

TEST(CpuParallel, LargeWorkUsesThreadsInProportion) {
  EXPECT_EQ(parallel_threads(3 * kMinParallelMacs, 0, 8), 3);
  EXPECT_EQ(parallel_threads(0, 5 * kMinParallelBytes, 8), 5);
  EXPECT_EQ(parallel_threads(2 * kMinParallelMacs, 7 * kMinParallelBytes, 4), 4);
  EXPECT_EQ(parallel_threads(int64_t{1} << 40, int64_t{1} << 40, 2), 2);
  EXPECT_EQ(parallel_threads(int64_t{1} << 40, 0, 0), 1);  // no threads allowed: still one
}

TEST(CpuParallel, ParallelForRunsEveryItemOnce) {
  for (int threads : {1, 2, 4}) {
    std::vector<std::atomic<int>> hits(37);
    std::atomic<int> bad_thread{0};
    const int team = team_size(37, threads);
    parallel_for(37, threads, [&](int64_t i, int th) {
      hits[static_cast<size_t>(i)].fetch_add(1);
      if (th < 0 || th >= team) bad_thread.fetch_add(1);
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1) << threads << " threads";
    EXPECT_EQ(bad_thread.load(), 0);
  }
}

TEST(CpuParallel, ParallelForRethrowsTheFirstError) {
  for (int threads : {1, 2}) {
    EXPECT_THROW(parallel_for(16, threads,
                              [](int64_t i, int) {
                                if (i == 5) throw std::runtime_error("item 5");
                              }),
                 std::runtime_error);
  }
}

}  // namespace
}  // namespace tandem::cpu
