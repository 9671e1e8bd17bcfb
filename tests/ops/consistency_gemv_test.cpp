// SPDX-License-Identifier: Apache-2.0
// Consistency of the small-M GEMM paths with the reference kernels. On the CPU backend these are
// the GEMV kernels (f32 weights [N, K] at M <= 4, every other weight dtype at M <= 8), which
// compute several W rows per pass, convert block scales a chunk of blocks at a time and cut long
// rows into slices: the cases leave partial passes (N not a multiple of the rows per pass), span
// several scale chunks and K slices, and cover transposed A, alpha and beta, and the switch to the
// library GEMM just past the GEMV's M.
#include <tuple>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

TEST(Gemm, F32SmallMRowsAndTails) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 600;
  for (int64_t m : {1, 2, 3, 4, 5}) {
    for (int64_t n : {1, 7, 8, 9, 23}) {
      for (int64_t k : {1, 15, 16, 17, 100}) {
        check_gemm({m, n, k, false, true, 1.0f, 0.0f}, DType::kF32, seed += 3);
        if (k == 17) check_gemm({m, n, k, true, true, 1.0f, 0.0f}, DType::kF32, seed += 3);
      }
    }
    check_gemm({m, 37, 70, false, true, -0.5f, 0.75f}, DType::kF32, seed += 3);
  }
}

TEST(Gemm, WeightGemvRowsAndScaleChunks) {
  TANDEM_OPS_PROLOGUE();
  // k = 2112: 66 blocks, past one chunk of converted scales (64 blocks).
  uint32_t seed = 700;
  for (DType wt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kF16, DType::kBF16}) {
    for (int64_t m = 1; m <= 8; ++m) {
      for (int64_t n : {1, 3, 9, 17}) {
        for (int64_t k : {32, 2112}) check_gemm({m, n, k, false, true, 1.0f, 0.0f}, wt, seed += 3);
      }
      check_gemm({m, 11, 96, m % 2 == 0, true, 0.5f, 0.25f}, wt, seed += 3);
    }
  }
}

TEST(Gemm, WeightGemvLongRows) {
  TANDEM_OPS_PROLOGUE();
  // 1058 blocks per row: past the 1024-block K slice of the M = 1 kernel (later slices add to y).
  const int64_t k = 1058 * 32;
  uint32_t seed = 800;
  for (DType wt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    check_gemm({1, 5, k, false, true, 1.0f, 0.0f}, wt, seed += 3);
    check_gemm({1, 9, k, false, true, 0.5f, -1.0f}, wt, seed += 3);
    check_gemm({2, 3, k, false, true, 1.0f, 0.5f}, wt, seed += 3);
  }
}

}  // namespace
}  // namespace tandem::testing
