// SPDX-License-Identifier: Apache-2.0
// Correctness of the CPU reference kernels themselves, against independent computations: Eigen for
// GEMM and attention, properties (softmax rows sum to one, RoPE preserves norms), hand-computed
// RoPE rotations and convolutions, quantization error bounds, f16/bf16 edge cases (inf, NaN,
// subnormals, ties to even), integer cast semantics, embedding id checks, and a GEMM enqueued on a
// CPU stream.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "tandem/core/backend.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

using MatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

ops::OpKernels& ref() { return ops::cpu_reference_kernels(); }

Tensor random_tensor(const Shape& s, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(s, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

MatD to_mat(const Tensor& t, int64_t rows, int64_t cols) {
  MatD m(rows, cols);
  for (int64_t i = 0; i < rows * cols; ++i) m.data()[i] = t.data<float>()[i];
  return m;
}

std::vector<float> convert_values(const std::vector<float>& v, DType t) {
  const Tensor x = Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::kF32);
  Tensor y = Tensor::empty(x.shape(), t);
  ref().convert(x, y, nullptr);
  return y.to_float_vector();
}

uint16_t bits_of(float v, DType t) {
  const Tensor x = Tensor::from_vector(std::vector<float>{v}, {1}, DType::kF32);
  Tensor y = Tensor::empty({1}, t);
  ref().convert(x, y, nullptr);
  return y.data<uint16_t>()[0];
}

TEST(ReferenceGemm, MatchesEigen) {
  for (auto [m, n, k] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1}, {5, 7, 3}, {31, 17, 64}}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 1);
        const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 2);
        const Tensor c0 = random_tensor({m, n}, 3);
        Tensor c = c0.clone();
        ref().gemm(a, b, c, {.trans_a = ta, .trans_b = tb, .alpha = 0.5f, .beta = 2.0f}, nullptr);
        MatD am = ta ? MatD(to_mat(a, k, m).transpose()) : to_mat(a, m, k);
        MatD bm = tb ? MatD(to_mat(b, n, k).transpose()) : to_mat(b, k, n);
        const MatD want = 0.5 * am * bm + 2.0 * to_mat(c0, m, n);
        for (int64_t i = 0; i < m * n; ++i)
          EXPECT_NEAR(c.data<float>()[i], want.data()[i], 1e-6 * (1.0 + std::fabs(want.data()[i])))
              << "m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << " at "
              << i;
      }
    }
  }
}

TEST(ReferenceGemm, QuantizedWeightsDecodeLikeTheirDequantization) {
  // gemm with a q4_1 weight equals gemm with that weight converted back to f32.
  const Tensor a = random_tensor({3, 64}, 4);
  Tensor wq = Tensor::empty({5, 64}, DType::kQ4_1);
  ref().convert(random_tensor({5, 64}, 5), wq, nullptr);
  Tensor wf = Tensor::empty({5, 64}, DType::kF32);
  ref().convert(wq, wf, nullptr);
  Tensor c1 = Tensor::empty({3, 5}, DType::kF32), c2 = Tensor::empty({3, 5}, DType::kF32);
  ref().gemm(a, wq, c1, {.trans_b = true}, nullptr);
  ref().gemm(a, wf, c2, {.trans_b = true}, nullptr);
  for (int i = 0; i < 15; ++i) EXPECT_FLOAT_EQ(c1.data<float>()[i], c2.data<float>()[i]);
}

TEST(ReferenceSoftmax, RowsSumToOneAndKeepOrder) {
  const Tensor x = random_tensor({4, 50}, 6, -60.0f, 60.0f);
  Tensor y = Tensor::empty(x.shape(), DType::kF32);
  ref().softmax(x, y, nullptr);
  for (int r = 0; r < 4; ++r) {
    double sum = 0.0;
    for (int j = 0; j < 50; ++j) {
      const float v = y.data<float>()[r * 50 + j];
      ASSERT_TRUE(std::isfinite(v));
      EXPECT_GE(v, 0.0f);
      sum += v;
      if (j > 0) {
        const bool x_up = x.data<float>()[r * 50 + j] > x.data<float>()[r * 50 + j - 1];
        const bool y_up = v > y.data<float>()[r * 50 + j - 1];
        if (x_up) EXPECT_TRUE(y_up || v == y.data<float>()[r * 50 + j - 1]);
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(ReferenceRope, HandComputedRotationAndNormPreservation) {
  // One token at position 3, one head of 4 dims, theta 10000: pair 0 turns by 3 rad, pair 1 by
  // 3/100.
  const std::vector<float> xv = {1.0f, 2.0f, 3.0f, 4.0f};
  const Tensor x = Tensor::from_vector(xv, {1, 1, 4}, DType::kF32);
  const Tensor pos = Tensor::from_vector(std::vector<int32_t>{3}, {1}, DType::kI32);
  const double a0 = 3.0, a1 = 3.0 / 100.0;
  Tensor y = Tensor::empty({1, 1, 4}, DType::kF32);
  ref().rope(x, pos, y, {}, nullptr);  // interleaved pairs (0,1), (2,3)
  const float* p = y.data<float>();
  EXPECT_NEAR(p[0], 1 * std::cos(a0) - 2 * std::sin(a0), 1e-6);
  EXPECT_NEAR(p[1], 1 * std::sin(a0) + 2 * std::cos(a0), 1e-6);
  EXPECT_NEAR(p[2], 3 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(p[3], 3 * std::sin(a1) + 4 * std::cos(a1), 1e-6);
  ref().rope(x, pos, y, {.neox = true}, nullptr);  // halves: pairs (0,2), (1,3)
  EXPECT_NEAR(p[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(p[2], 1 * std::sin(a0) + 3 * std::cos(a0), 1e-6);
  EXPECT_NEAR(p[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(p[3], 2 * std::sin(a1) + 4 * std::cos(a1), 1e-6);
  // Partial rotary: dims beyond rotary_dim pass through.
  ref().rope(x, pos, y, {.rotary_dim = 2}, nullptr);
  EXPECT_EQ(p[2], 3.0f);
  EXPECT_EQ(p[3], 4.0f);

  // Norms of every head are preserved, and position 0 is the identity.
  const Tensor xs = random_tensor({6, 3, 64}, 7);
  const Tensor ps =
      Tensor::from_vector(std::vector<int32_t>{0, 1, 7, 100, 2047, 40000}, {6}, DType::kI32);
  Tensor ys = Tensor::empty(xs.shape(), DType::kF32);
  for (bool neox : {false, true}) {
    ref().rope(xs, ps, ys, {.neox = neox}, nullptr);
    for (int64_t h = 0; h < 18; ++h) {
      double nx = 0, ny = 0;
      for (int64_t j = 0; j < 64; ++j) {
        nx += std::pow(xs.data<float>()[h * 64 + j], 2);
        ny += std::pow(ys.data<float>()[h * 64 + j], 2);
      }
      EXPECT_NEAR(std::sqrt(ny), std::sqrt(nx), 1e-5);
    }
    for (int64_t j = 0; j < 3 * 64; ++j) EXPECT_EQ(ys.data<float>()[j], xs.data<float>()[j]);
  }
}

TEST(ReferenceAttention, MatchesNaiveSoftmaxQKtV) {
  const int64_t tq = 5, tk = 9, hq = 6, hkv = 2, d = 8, dv = 4, group = hq / hkv;
  const Tensor q = random_tensor({tq, hq, d}, 8), k = random_tensor({tk, hkv, d}, 9),
               v = random_tensor({tk, hkv, dv}, 10);
  for (bool causal : {true, false}) {
    const int64_t offset = tk - tq;
    ops::AttentionParams p{
        .scale = 0.4f, .causal = causal, .q_offset = offset, .prob_rows = {1, 4}};
    Tensor out = Tensor::empty({tq, hq, dv}, DType::kF32),
           probs = Tensor::empty({hq, 2, tk}, DType::kF32);
    ref().attention(q, k, v, out, p, &probs, nullptr);
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t g = h / group;
      MatD qh(tq, d), kh(tk, d), vh(tk, dv);
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t c = 0; c < d; ++c) qh(i, c) = q.data<float>()[(i * hq + h) * d + c];
      for (int64_t j = 0; j < tk; ++j) {
        for (int64_t c = 0; c < d; ++c) kh(j, c) = k.data<float>()[(j * hkv + g) * d + c];
        for (int64_t c = 0; c < dv; ++c) vh(j, c) = v.data<float>()[(j * hkv + g) * dv + c];
      }
      MatD s = 0.4 * qh * kh.transpose();
      for (int64_t i = 0; i < tq; ++i) {
        for (int64_t j = 0; j < tk; ++j)
          if (causal && j > offset + i) s(i, j) = -std::numeric_limits<double>::infinity();
        s.row(i) = (s.row(i).array() - s.row(i).maxCoeff()).exp();
        s.row(i) /= s.row(i).sum();
      }
      const MatD o = s * vh;
      for (int64_t i = 0; i < tq; ++i)
        for (int64_t c = 0; c < dv; ++c)
          EXPECT_NEAR(out.data<float>()[(i * hq + h) * dv + c], o(i, c), 1e-6)
              << "h " << h << " i " << i;
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t j = 0; j < tk; ++j)
          EXPECT_NEAR(probs.data<float>()[(h * 2 + r) * tk + j], s(p.prob_rows[r], j), 1e-6);
    }
  }
}

// |x - deq(q(x))| <= d/2 per block, where d is the block's scale (plus the rounding of d to f16:
// at most 2^-11 relative, times the largest code). Q4_0 codes reach d*(-8) .. d*7, so values on the
// side opposite the largest magnitude beyond 7.5 d are clipped to 7 d: there the bound is |d|.
TEST(ReferenceQuantize, RoundTripWithinHalfAStep) {
  const Tensor x = random_tensor({8, 256}, 11, -4.0f, 4.0f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    Tensor q = Tensor::empty(x.shape(), t);
    ref().convert(x, q, nullptr);
    const std::vector<float> back = q.to_float_vector();
    const int64_t bytes = dtype_block_bytes(t);
    for (int64_t b = 0; b < x.numel() / 32; ++b) {
      uint16_t dh;
      std::memcpy(&dh, static_cast<const uint8_t*>(q.raw_data()) + b * bytes, 2);
      const double d = std::fabs(f16_to_f32(dh));
      const double max_code = t == DType::kQ8_0 ? 127 : 15;
      const double bound = d / 2 + max_code * d * std::ldexp(1.0, -11) + 1e-7;
      for (int j = 0; j < 32; ++j) {
        const int64_t i = b * 32 + j;
        const double xi = x.data<float>()[i];
        const bool clipped = t == DType::kQ4_0 && d > 0 && xi / f16_to_f32(dh) > 7.5;
        EXPECT_LE(std::fabs(xi - back[i]), clipped ? 2 * bound : bound)
            << dtype_name(t) << " element " << i;
      }
    }
  }
  // Scales follow the GGUF reference formulas.
  std::vector<float> v(32);
  for (int j = 0; j < 32; ++j) v[j] = static_cast<float>(j) * 0.25f - 3.0f;  // -3 .. 4.75
  const Tensor xb = Tensor::from_vector(v, {32}, DType::kF32);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    Tensor q = Tensor::empty({32}, t);
    ref().convert(xb, q, nullptr);
    uint16_t dh, mh;
    std::memcpy(&dh, q.raw_data(), 2);
    std::memcpy(&mh, static_cast<const uint8_t*>(q.raw_data()) + 2, 2);
    if (t == DType::kQ8_0) EXPECT_EQ(dh, f32_to_f16(4.75f / 127.0f));
    if (t == DType::kQ4_0) EXPECT_EQ(dh, f32_to_f16(4.75f / -8.0f));
    if (t == DType::kQ4_1) {
      EXPECT_EQ(dh, f32_to_f16(7.75f / 15.0f));
      EXPECT_EQ(mh, f32_to_f16(-3.0f));
    }
  }
  // A constant block: zero scale, decoded exactly (q4_1 carries the value in m).
  const std::vector<float> c(32, 0.0f), c2(32, 1.5f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (float back : convert_values(c, t)) EXPECT_EQ(back, 0.0f);
  }
  for (float back : convert_values(c2, DType::kQ4_1)) EXPECT_EQ(back, 1.5f);
}

TEST(ReferenceConvert, HalfAndBfloatEdgeCases) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(inf, DType::kF16), 0x7c00);
  EXPECT_EQ(bits_of(-inf, DType::kF16), 0xfc00);
  EXPECT_EQ(bits_of(65504.0f, DType::kF16), 0x7bff);  // largest finite
  EXPECT_EQ(bits_of(65520.0f, DType::kF16), 0x7c00);  // halfway to 2^16: ties to even -> inf
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -24), DType::kF16), 0x0001);  // smallest subnormal
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -25), DType::kF16),
            0x0000);  // halfway to it: ties to even -> 0
  EXPECT_EQ(bits_of(std::ldexp(3.0f, -25), DType::kF16), 0x0002);  // 1.5 ulp: ties to even -> 2
  EXPECT_EQ(bits_of(std::ldexp(1.0f, -14), DType::kF16), 0x0400);  // smallest normal
  EXPECT_EQ(bits_of(1.0f + std::ldexp(1.0f, -11), DType::kF16), 0x3c00);      // tie -> even (1.0)
  EXPECT_EQ(bits_of(1.0f + 3 * std::ldexp(1.0f, -11), DType::kF16), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(bits_of(-0.0f, DType::kF16), 0x8000);
  const uint16_t hn = bits_of(std::numeric_limits<float>::quiet_NaN(), DType::kF16);
  EXPECT_EQ(hn & 0x7c00, 0x7c00);
  EXPECT_NE(hn & 0x03ff, 0);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));

  EXPECT_EQ(bits_of(inf, DType::kBF16), 0x7f80);
  EXPECT_EQ(bits_of(1.0f + std::ldexp(1.0f, -8), DType::kBF16), 0x3f80);      // tie -> even (1.0)
  EXPECT_EQ(bits_of(1.0f + 3 * std::ldexp(1.0f, -8), DType::kBF16), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bits_of(1e-40f, DType::kBF16), 0x0001);                           // subnormal kept
  EXPECT_TRUE(
      std::isnan(bf16_to_f32(bits_of(std::numeric_limits<float>::quiet_NaN(), DType::kBF16))));
  EXPECT_EQ(bits_of(3.4e38f, DType::kBF16), 0x7f80);  // rounds past the largest -> inf
}

TEST(ReferenceConvert, IntegerRoundingAndSaturation) {
  const std::vector<float> v = {
      300.0f, -300.0f, 2.5f, 3.5f, -2.5f, std::numeric_limits<float>::quiet_NaN(), 17.0f, -1.0f};
  const auto i8 = convert_values(v, DType::kI8);
  EXPECT_EQ(i8, (std::vector<float>{127, -128, 2, 4, -2, 0, 17, -1}));
  const auto u8 = convert_values(v, DType::kU8);
  EXPECT_EQ(u8, (std::vector<float>{255, 0, 2, 4, 0, 0, 17, 0}));
  const auto u4 = convert_values(v, DType::kU4);
  EXPECT_EQ(u4, (std::vector<float>{15, 0, 2, 4, 0, 0, 15, 0}));
  // u4 packing: element 2i in the low nibble.
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {4}, DType::kF32);
  Tensor p = Tensor::empty({4}, DType::kU4);
  ref().convert(x, p, nullptr);
  EXPECT_EQ(static_cast<const uint8_t*>(p.raw_data())[0], 0x21);
  EXPECT_EQ(static_cast<const uint8_t*>(p.raw_data())[1], 0x43);
}

TEST(ReferenceConv2d, HandComputedCases) {
  // x = 1..9 (3x3), w = [[1, 0], [0, -1]]: every output is x[i][j] - x[i+1][j+1] = -4.
  std::vector<float> xv(9);
  for (int i = 0; i < 9; ++i) xv[i] = static_cast<float>(i + 1);
  const Tensor x = Tensor::from_vector(xv, {1, 1, 3, 3}, DType::kF32);
  const Tensor w = Tensor::from_vector(std::vector<float>{1, 0, 0, -1}, {1, 1, 2, 2}, DType::kF32);
  Tensor y = Tensor::empty({1, 1, 2, 2}, DType::kF32);
  ref().conv2d(x, w, Tensor(), y, {}, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y.data<float>()[i], -4.0f);
  // Padding 1, stride 2, bias 10: outputs at (-1,-1), (-1,1), (1,-1), (1,1) of the padded grid.
  ops::Conv2dParams p;
  p.stride_h = p.stride_w = 2;
  p.pad_top = p.pad_left = p.pad_bottom = p.pad_right = 1;
  const Tensor bias = Tensor::from_vector(std::vector<float>{10}, {1}, DType::kF32);
  Tensor y2 = Tensor::empty(ops::conv2d_output_shape(x.shape(), w.shape(), p), DType::kF32);
  ASSERT_EQ(y2.shape(), (Shape{1, 1, 2, 2}));
  ref().conv2d(x, w, bias, y2, p, nullptr);
  // (0,0): x[-1][-1]*1 - x[0][0] = -1; (0,1): x[-1][1] - x[0][2] = -3; (1,0): x[1][-1] - x[2][0] =
  // -7; (1,1): x[1][1] - x[2][2] = 5 - 9 = -4; plus the bias.
  EXPECT_EQ(y2.data<float>()[0], 9.0f);
  EXPECT_EQ(y2.data<float>()[1], 7.0f);
  EXPECT_EQ(y2.data<float>()[2], 3.0f);
  EXPECT_EQ(y2.data<float>()[3], 6.0f);
  // Two groups, dilation 2: each output channel sums the corners of its own input channel.
  std::vector<float> x2(18);
  for (int i = 0; i < 18; ++i) x2[i] = static_cast<float>(i);
  const Tensor xg = Tensor::from_vector(x2, {1, 2, 3, 3}, DType::kF32);
  const Tensor wg = Tensor::from_vector(std::vector<float>(8, 1.0f), {2, 1, 2, 2}, DType::kF32);
  ops::Conv2dParams pg;
  pg.groups = 2;
  pg.dilation_h = pg.dilation_w = 2;
  Tensor yg = Tensor::empty({1, 2, 1, 1}, DType::kF32);
  ref().conv2d(xg, wg, Tensor(), yg, pg, nullptr);
  EXPECT_EQ(yg.data<float>()[0], 0 + 2 + 6 + 8);
  EXPECT_EQ(yg.data<float>()[1], 9 + 11 + 15 + 17);
}

TEST(ReferenceEmbedding, OutOfRangeIdsThrow) {
  Tensor table = random_tensor({4, 32}, 12);
  Tensor out = Tensor::empty({1, 32}, DType::kF32);
  for (int32_t bad : {-1, 4, 100}) {
    const Tensor ids = Tensor::from_vector(std::vector<int32_t>{bad}, {1}, DType::kI32);
    EXPECT_THROW(ref().embedding(table, ids, out, nullptr), InvalidArgument);
    EXPECT_THROW(ops::embedding(table, ids, out), InvalidArgument);
  }
  const Tensor ok = Tensor::from_vector(std::vector<int32_t>{3}, {1}, DType::kI32);
  ref().embedding(table, ok, out, nullptr);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out.data<float>()[j], table.data<float>()[3 * 32 + j]);
}

TEST(ReferenceStream, GemmOnCpuStreamMatchesSynchronous) {
  const Tensor a = random_tensor({20, 30}, 13), b = random_tensor({30, 40}, 14);
  Tensor c_sync = Tensor::empty({20, 40}, DType::kF32),
         c_async = Tensor::empty({20, 40}, DType::kF32);
  ops::gemm(a, b, c_sync);
  auto s = create_stream(Device::cpu());
  ops::gemm(a, b, c_async, {}, s.get());
  s->synchronize();
  EXPECT_EQ(
      std::memcmp(c_sync.raw_data(), c_async.raw_data(), static_cast<size_t>(c_sync.nbytes())), 0);
  // The reference kernels synchronize the stream first, so they see the enqueued gemm's result.
  ops::gemm(a, b, c_async, {.alpha = 2.0f}, s.get());
  Tensor soft_async = Tensor::empty({20, 40}, DType::kF32),
         soft_sync = Tensor::empty({20, 40}, DType::kF32);
  ref().softmax(c_async, soft_async, s.get());
  Tensor doubled = c_sync.clone();
  for (int i = 0; i < 800; ++i) doubled.data<float>()[i] *= 2.0f;
  ref().softmax(doubled, soft_sync, nullptr);
  for (int i = 0; i < 800; ++i)
    EXPECT_NEAR(soft_async.data<float>()[i], soft_sync.data<float>()[i], 1e-6f);
}

}  // namespace
}  // namespace tandem
