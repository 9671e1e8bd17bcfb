// SPDX-License-Identifier: Apache-2.0
// Consistency of the small-M GEMM paths with the reference kernels. On the CPU backend these are
// the GEMV kernels (f32 weights [N, K] at M <= 4, every other weight dtype at M <= 8), which
// compute several W rows per pass, convert block scales a chunk of blocks at a time and cut long
// rows into slices: the cases leave partial passes (N not a multiple of the rows per pass), span
// several scale chunks and K slices, and cover transposed A, alpha and beta, and the switch to the
// library GEMM just past the GEMV's M.
#include <algorithm>
#include <cmath>
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

// GemmParams::int8_activations (decode steps): the backend may round A to int8 per 32-element
// block (d = max|x| / 127; the CPU at M <= 16 with AVX-512 VNNI, CUDA at M <= 8 with __dp4a) or
// ignore the flag. Rounding a(i, j) to its block's grid d_b moves it by at most d_b / 2, so
// c(i, n) moves by at most |alpha| sum_j |w(n, j)| d_b / 2: the tolerance, per element, is that
// bound plus the f32 reduction tolerance.
TEST(Gemm, Int8ActivationsWithinTheirRounding) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 900;
  for (DType wt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (const GemmCase& g : {GemmCase{1, 37, 576, false, true, 1.0f, 0.0f},
                              GemmCase{1, 300, 1536, false, true, 0.5f, 0.25f},
                              GemmCase{3, 9, 2112, false, true, 1.0f, 0.0f},
                              GemmCase{8, 17, 96, true, true, -1.0f, 1.0f},
                              GemmCase{16, 33, 576, false, true, 1.0f, 0.5f}}) {
      const std::string what = cat("int8 gemm ", dtype_name(wt), " m=", g.m, " n=", g.n, " k=", g.k,
                                   " ta=", g.ta, " alpha=", g.alpha, " beta=", g.beta);
      SCOPED_TRACE(what);
      seed += 3;
      const Tensor a = random_tensor(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, seed, -3.0f, 3.0f);
      const Tensor b = converted(random_tensor({g.n, g.k}, seed + 1), wt);
      const Tensor c0 = random_tensor({g.m, g.n}, seed + 2);
      ops::GemmParams p{.trans_a = g.ta,
                        .trans_b = true,
                        .alpha = g.alpha,
                        .beta = g.beta,
                        .int8_activations = true};
      Tensor want = c0.clone();
      reference().gemm(a, b, want, p, nullptr);
      Guarded out({g.m, g.n}, DType::kF32, g.beta != 0.0f ? &c0 : nullptr);
      ops::gemm(on_device(a), on_device(b), out.view(), p);
      const Tensor got = out.result(what);
      const std::vector<float> av = a.contiguous().to_float_vector(), bv = b.to_float_vector();
      const Tol red = tol::reduction(g.k);
      int64_t bad = 0;
      for (int64_t i = 0; i < g.m; ++i) {
        for (int64_t n = 0; n < g.n; ++n) {
          double bound = 0.0;
          for (int64_t b0 = 0; b0 < g.k; b0 += 32) {
            double amax = 0.0;
            for (int64_t j = b0; j < b0 + 32; ++j)
              amax = std::max(amax, std::fabs(double{av[g.ta ? j * g.m + i : i * g.k + j]}));
            for (int64_t j = b0; j < b0 + 32; ++j)
              bound += std::fabs(double{bv[n * g.k + j]}) * amax / 127.0 / 2.0;
          }
          const double w = want.data<float>()[i * g.n + n], x = got.data<float>()[i * g.n + n];
          const double allowed = std::fabs(g.alpha) * bound + red.atol + red.rtol * std::fabs(w);
          if (!(std::fabs(x - w) <= allowed) && bad++ < 3)
            ADD_FAILURE() << what << ": c(" << i << ", " << n << ") = " << x << ", want " << w
                          << " within " << allowed;
        }
      }
      EXPECT_EQ(bad, 0) << what;
    }
  }
}

}  // namespace
}  // namespace tandem::testing
