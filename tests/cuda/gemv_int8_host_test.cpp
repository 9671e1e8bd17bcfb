// SPDX-License-Identifier: Apache-2.0
// The CUDA int8-activation GEMV's per-block arithmetic (backends/cuda/kernels/gemv_int8_block.h)
// compiled for the host, on a machine without a GPU: a row product assembled from its activation
// quantizer and weight-block dot products, block by block as the kernel's lanes do, against
//  - the exact (double) product of the decoded weights with the activations rounded the way the
//    CPU backend's int8 path rounds them (d = max|x| / 127, ties to even): only f32 rounding of the
//    block sums is left, so the bound is 1e-5 of sum |w x| (wrong nibble order, offsets or scales
//    miss it by orders of magnitude);
//  - the CPU reference kernels' f32 product: rounding x_j to its block's grid d_b = max|x_b| / 127
//    moves it by at most d_b / 2, so the row product moves by at most sum_j |w_j| d_b / 2; the
//    tolerance is that bound plus the same 1e-5 of f32 accumulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../backends/cuda/kernels/gemv_int8_block.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

template <DType T>
float row_dot(const uint8_t* row, const int8_t* q, const float* d, const float* s, int64_t blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    int words[8];
    std::memcpy(words, q + b * 32, 32);
    acc += cuda::weight_block_dot<T>(row + b * dtype_block_bytes(T), words, d[b], s[b]);
  }
  return acc;
}

float row_dot(DType t, const uint8_t* row, const int8_t* q, const float* d, const float* s,
              int64_t blocks) {
  if (t == DType::kQ8_0) return row_dot<DType::kQ8_0>(row, q, d, s, blocks);
  if (t == DType::kQ4_0) return row_dot<DType::kQ4_0>(row, q, d, s, blocks);
  return row_dot<DType::kQ4_1>(row, q, d, s, blocks);
}

void check(DType wt, int64_t n, int64_t k, int64_t stride, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << dtype_name(wt) << " n " << n << " k " << k << " stride "
                                  << stride);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> wv(static_cast<size_t>(n * k)), xs(static_cast<size_t>(k * stride));
  for (float& v : wv) v = nd(rng);
  for (float& v : xs) v = nd(rng) * (rng() % 4 == 0 ? 30.0f : 1.0f);
  Tensor w = Tensor::empty({n, k}, wt);
  ops::convert(Tensor::from_vector(wv, {n, k}, DType::kF32), w);
  Tensor wf = Tensor::empty({n, k}, DType::kF32);
  ops::convert(w, wf);
  std::vector<float> x(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) x[j] = xs[j * stride];
  const Tensor xt = Tensor::from_vector(x, {1, k}, DType::kF32);
  Tensor want = Tensor::empty({1, n}, DType::kF32);
  ops::cpu_reference_kernels().gemm(xt, w, want, {.trans_b = true}, nullptr);

  // The activation row as the kernel's first pass rounds it (read with a stride, as transposed A).
  const int64_t blocks = k / 32;
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> d(static_cast<size_t>(blocks)), s(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b)
    cuda::quantize_activation_block(xs.data() + b * 32 * stride, stride, &q[b * 32], &d[b], &s[b]);

  // The rounding the CPU backend's int8 path defines, spelled out independently.
  std::vector<double> xr(static_cast<size_t>(k));
  std::vector<float> grid(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    float amax = 0.0f;
    for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float db = amax / 127.0f, id = db != 0.0f ? 1.0f / db : 0.0f;
    grid[b] = db;
    int sum = 0;
    for (int64_t j = 0; j < 32; ++j) {
      const float r = std::nearbyint(x[b * 32 + j] * id);
      ASSERT_EQ(q[b * 32 + j], static_cast<int8_t>(r)) << "block " << b << " element " << j;
      xr[b * 32 + j] = double{db} * r;
      sum += static_cast<int>(r);
    }
    ASSERT_EQ(d[b], db);
    ASSERT_EQ(s[b], db * static_cast<float>(sum));
  }

  const auto* wb = static_cast<const uint8_t*>(w.raw_data());
  const int64_t rb = dtype_row_bytes(wt, k);
  const float* wd = wf.data<float>();
  double worst_exact = 0.0, worst_ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float got = row_dot(wt, wb + i * rb, q.data(), d.data(), s.data(), blocks);
    double exact = 0.0, abs_sum = 0.0, bound = 0.0;
    for (int64_t j = 0; j < k; ++j) {
      const double wj = wd[i * k + j];
      exact += wj * xr[j];
      abs_sum += std::fabs(wj * x[j]);
      bound += std::fabs(wj) * grid[j / 32] / 2.0;
    }
    worst_exact = std::max(worst_exact, std::fabs(got - exact) / (1e-5 * (abs_sum + 1.0)));
    worst_ref = std::max(worst_ref, std::fabs(got - want.data<float>()[i]) /
                                        (bound + 1e-5 * (abs_sum + 1.0)));
  }
  EXPECT_LE(worst_exact, 1.0);
  EXPECT_LE(worst_ref, 1.0);
}

TEST(CudaGemvInt8OnHost, BlockDotsMatchTheReferenceWithinTheActivationRounding) {
  uint32_t seed = 5;
  for (DType wt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    check(wt, 7, 32, 1, seed += 3);     // one block
    check(wt, 9, 576, 1, seed += 3);    // SmolLM2's d_model
    check(wt, 5, 1536, 3, seed += 3);   // strided activations (transposed A)
    check(wt, 3, 11008, 1, seed += 3);  // a 7B FFN's down projection
  }
}

TEST(CudaGemvInt8OnHost, ZeroBlocksAndSaturatedCodes) {
  // An all-zero activation block (d = 0) and one whose largest value is negative (code -127).
  std::vector<float> x(64, 0.0f);
  for (int j = 0; j < 32; ++j) x[32 + j] = static_cast<float>(j) - 31.0f;
  int8_t q[64];
  float d[2], s[2];
  for (int b = 0; b < 2; ++b) cuda::quantize_activation_block(&x[b * 32], 1, &q[b * 32], &d[b], &s[b]);
  EXPECT_EQ(d[0], 0.0f);
  EXPECT_EQ(s[0], 0.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(q[j], 0);
  EXPECT_EQ(q[32], -127);
  EXPECT_EQ(q[63], 0);
  EXPECT_EQ(d[1], 31.0f / 127.0f);
  // dot4_i8 on the extremes of int8.
  EXPECT_EQ(cuda::dot4_i8(static_cast<int>(0x80808080u), static_cast<int>(0x7f7f7f7fu), 1),
            1 + 4 * (-128 * 127));
}

}  // namespace
}  // namespace tandem
