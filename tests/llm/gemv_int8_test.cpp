// SPDX-License-Identifier: Apache-2.0
// The int8-activation decode GEMV (ops::GemmParams::int8_activations, backends/cpu/fast/
// gemv_int8.h) against an exact double-precision product of the dequantized weights and the same
// activations rounded to int8 blocks the way llama.cpp rounds them (so the only difference left is
// f32 rounding), and against the f32 path within the error of 8-bit activations. Shapes cover odd
// and even block counts, one and several 16-block scale chunks, partial row passes, alpha/beta,
// one and two threads, and the K-quants' super-blocks. Where the host has no AVX-512 VNNI the flag
// is ignored and the results must equal the f32 path exactly. Also: Model::forward's
// DecodeArithmetic on a decode step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "llm/gguf_test_util.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/tensor.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

struct Case {
  int64_t n, k;
  float alpha, beta;
};

// x rounded to int8 per 32-block: d = max|x| / 127, q = nearest(x / d) (ties to even).
std::vector<double> round_like_q8(const std::vector<float>& x) {
  std::vector<double> r(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float amax = 0.0f;
    for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b + j]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (size_t j = 0; j < 32; ++j) r[b + j] = double{d} * std::nearbyint(x[b + j] * id);
  }
  return r;
}

void check(DType wt, const Case& c, int threads, uint32_t seed) {
  SCOPED_TRACE(testing::Message() << dtype_name(wt) << " n " << c.n << " k " << c.k << " alpha "
                                  << c.alpha << " beta " << c.beta << " threads " << threads);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> wv(static_cast<size_t>(c.n * c.k)), xv(static_cast<size_t>(c.k)),
      y0(static_cast<size_t>(c.n));
  for (float& v : wv) v = nd(rng);
  for (float& v : xv) v = nd(rng);
  for (float& v : y0) v = nd(rng);
  Tensor w = Tensor::empty({c.n, c.k}, wt);
  if (dtype_is_k_quant(wt)) {  // no quantizer: random super-blocks as a GGUF file holds them
    std::mt19937_64 bytes(seed);
    w = llm::testing::random_kquant({c.n, c.k}, wt, bytes);
  } else {
    ops::convert(Tensor::from_vector(wv, {c.n, c.k}, DType::kF32), w);
  }
  Tensor wf = Tensor::empty({c.n, c.k}, DType::kF32);
  ops::convert(w, wf);  // the weights as the format defines them
  const Tensor x = Tensor::from_vector(xv, {1, c.k}, DType::kF32);
  Tensor y_int8 = Tensor::from_vector(y0, {1, c.n}, DType::kF32);
  Tensor y_f32 = Tensor::from_vector(y0, {1, c.n}, DType::kF32);
  set_cpu_num_threads(threads);
  ops::gemm(x, w, y_int8,
            {.trans_b = true, .alpha = c.alpha, .beta = c.beta, .int8_activations = true});
  ops::gemm(x, w, y_f32, {.trans_b = true, .alpha = c.alpha, .beta = c.beta});

  const std::vector<double> xr = round_like_q8(xv);
  const float* wd = wf.data<float>();
  double worst_exact = 0.0, worst_f32 = 0.0, scale = 0.0;
  bool same_as_f32 = true;
  for (int64_t i = 0; i < c.n; ++i) {
    double dot_r = 0.0, dot_abs = 0.0;
    for (int64_t j = 0; j < c.k; ++j) {
      dot_r += double{wd[i * c.k + j]} * xr[j];
      dot_abs += std::fabs(double{wd[i * c.k + j]} * xv[j]);
    }
    // Rounding x_j to the grid d_b = max|x in its block b| / 127 moves it by |e_j| <= d_b / 2, so
    // the product moves by |sum_j w_j e_j| <= sum_j |w_j| d_b / 2: the worst case of the int8 path
    // against f32 activations.
    double grid_bound = 0.0;
    for (int64_t b = 0; b < c.k; b += 32) {
      float amax = 0.0f;
      for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xv[b + j]));
      for (int64_t j = 0; j < 32; ++j) {
        grid_bound += std::fabs(double{wd[i * c.k + b + j]}) * (amax / 127.0) / 2.0;
      }
    }
    const double want = c.alpha * dot_r + c.beta * y0[i];
    const double got = y_int8.data<float>()[i], f32 = y_f32.data<float>()[i];
    worst_exact = std::max(worst_exact, std::fabs(got - want) / (dot_abs + 1.0));
    // Beyond the bound: f32 accumulation of both paths (1e-5 relative, as the exact check).
    const double allowed = std::fabs(c.alpha) * grid_bound + 1e-5 * (dot_abs + 1.0);
    worst_f32 = std::max(worst_f32, std::fabs(got - f32) / allowed);
    same_as_f32 = same_as_f32 && got == f32;
    scale = std::max(scale, dot_abs);
  }
  EXPECT_GT(scale, 0.0);
  // Identical results: the host has no int8 path (no AVX-512 VNNI, or TANDEM_CPU_ISA /
  // TANDEM_INT8_GEMV=0) and the flag fell back to the f32 GEMV, which is what it must do there.
  if (same_as_f32) return;
  // Against the exact product of the rounded activations: f32 accumulation only.
  EXPECT_LE(worst_exact, 1e-5);
  // Against f32 activations: within the worst case of the 8-bit rounding derived above.
  EXPECT_LE(worst_f32, 1.0);
}

TEST(GemvInt8, MatchesRoundedActivationsExactlyAndF32Closely) {
  const int saved = cpu_num_threads();
  uint32_t seed = 11;
  const std::vector<Case> cases = {
      {1, 32, 1.0f, 0.0f},      // one block (odd: the pad block)
      {5, 64, 1.0f, 0.0f},      // a partial row pass
      {9, 576, 1.0f, 0.0f},     // 18 blocks: a full and a partial scale chunk (SmolLM2's d)
      {17, 1536, 0.5f, 0.25f},  // 48 blocks, alpha and beta
      {300, 544, 1.0f, 1.0f},   // 17 blocks, many rows (threads split them: a static split)
      {7300, 576, 1.0f, 0.0f},  // over 4 MiB of q8_0 (the output head's case: chunks to threads)
  };
  for (DType wt : {DType::kQ4_1, DType::kQ8_0, DType::kQ4_0}) {
    for (const Case& c : cases) {
      for (int threads : {1, 2}) check(wt, c, threads, seed += 7);
    }
  }
  set_cpu_num_threads(saved);
}

// GGUF's Q4_K and Q6_K (Q4_K_M files): super-blocks of 256, so K is a multiple of 256.
TEST(GemvInt8, KQuantsMatchRoundedActivationsExactlyAndF32Closely) {
  const int saved = cpu_num_threads();
  uint32_t seed = 41;
  const std::vector<Case> cases = {
      {1, 256, 1.0f, 0.0f},      // one super-block
      {7, 768, 0.5f, 0.25f},     // three, alpha and beta
      {300, 1024, 1.0f, 1.0f},   // many rows (threads split them)
      {1100, 4096, 1.0f, 0.0f},  // over 4 MiB of Q6_K (chunks to threads)
  };
  for (DType wt : {DType::kQ4_K, DType::kQ6_K}) {
    for (const Case& c : cases) {
      for (int threads : {1, 2}) check(wt, c, threads, seed += 7);
    }
  }
  set_cpu_num_threads(saved);
}

TEST(GemvInt8, IgnoredWhereItDoesNotApply) {
  // f32 weights take the f32 paths whatever the flag says, one row or several.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto [m, k, wt] : {std::tuple{1, 48, DType::kF32}, std::tuple{3, 64, DType::kF32}}) {
    std::vector<float> wv(static_cast<size_t>(8 * k)), xv(static_cast<size_t>(m * k));
    for (float& v : wv) v = nd(rng);
    for (float& v : xv) v = nd(rng);
    Tensor w = Tensor::empty({8, k}, wt);
    ops::convert(Tensor::from_vector(wv, {8, k}, DType::kF32), w);
    const Tensor x = Tensor::from_vector(xv, {m, k}, DType::kF32);
    Tensor a = Tensor::empty({m, 8}, DType::kF32), b = Tensor::empty({m, 8}, DType::kF32);
    ops::gemm(x, w, a, {.trans_b = true, .int8_activations = true});
    ops::gemm(x, w, b, {.trans_b = true});
    for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]);
  }
}

// Several activation rows (a batched decode step): each row's result equals that row's one-row
// GEMV bit for bit, for every format, ragged row counts, partial 16-block chunks, alpha / beta and
// one and two threads; so a sequence decodes the same batched as alone.
TEST(GemvInt8, RowsOfABatchAreComputedAsAlone) {
  const int saved = cpu_num_threads();
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (DType wt : {DType::kQ4_1, DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const int64_t k = dtype_is_k_quant(wt) ? 768 : 576, n = 301;
    Tensor w = Tensor::empty({n, k}, wt);
    if (dtype_is_k_quant(wt)) {
      std::mt19937_64 bytes(7);
      w = llm::testing::random_kquant({n, k}, wt, bytes);
    } else {
      std::vector<float> wv(static_cast<size_t>(n * k));
      for (float& v : wv) v = nd(rng);
      ops::convert(Tensor::from_vector(wv, {n, k}, DType::kF32), w);
    }
    for (int64_t m : {2, 3, 5, 9, 16}) {
      for (int threads : {1, 2}) {
        SCOPED_TRACE(testing::Message() << dtype_name(wt) << " m " << m << " threads " << threads);
        set_cpu_num_threads(threads);
        std::vector<float> xv(static_cast<size_t>(m * k)), y0(static_cast<size_t>(m * n));
        for (float& v : xv) v = nd(rng);
        for (float& v : y0) v = nd(rng);
        const ops::GemmParams p{
            .trans_b = true, .alpha = 0.75f, .beta = 0.5f, .int8_activations = true};
        Tensor y = Tensor::from_vector(y0, {m, n}, DType::kF32);
        ops::gemm(Tensor::from_vector(xv, {m, k}, DType::kF32), w, y, p);
        int64_t differ = 0;
        for (int64_t i = 0; i < m; ++i) {
          const std::vector<float> xi(xv.begin() + i * k, xv.begin() + (i + 1) * k);
          const std::vector<float> yi0(y0.begin() + i * n, y0.begin() + (i + 1) * n);
          Tensor yi = Tensor::from_vector(yi0, {1, n}, DType::kF32);
          ops::gemm(Tensor::from_vector(xi, {1, k}, DType::kF32), w, yi, p);
          for (int64_t j = 0; j < n; ++j)
            differ += y.data<float>()[i * n + j] != yi.data<float>()[j];
        }
        EXPECT_EQ(differ, 0);
      }
    }
  }
  set_cpu_num_threads(saved);
}

// A random [n, k] weight of dtype wt (the K-quants as random super-blocks).
Tensor random_weight(int64_t n, int64_t k, DType wt, std::mt19937& rng) {
  if (dtype_is_k_quant(wt)) {
    std::mt19937_64 bytes(rng());
    return llm::testing::random_kquant({n, k}, wt, bytes);
  }
  std::normal_distribution<float> nd;
  std::vector<float> wv(static_cast<size_t>(n * k));
  for (float& v : wv) v = nd(rng);
  Tensor w = Tensor::empty({n, k}, wt);
  ops::convert(Tensor::from_vector(wv, {n, k}, DType::kF32), w);
  return w;
}

Tensor random_rows(int64_t m, int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<float> v(static_cast<size_t>(m * n));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, {m, n}, DType::kF32);
}

// ops::gemm_group (a layer's q/k/v or gate/up as one pass of the int8 GEMV: x rounded once, the
// rows of all the weights split over one team) gives every output bit for bit what ops::gemm gives
// it alone: every int8 format, mixed formats in one group (a Q4_K_M layer's Q4_K q/k and Q6_K v),
// one row and batched rows, 1 and 2 threads (every group is large enough for two: one row range
// each, the split falling inside one weight or between two), a
// group above the 4 MiB static-split size (chunks), alpha / beta, and the f32 arithmetic.
TEST(GemvInt8, GroupIsBitEqualToSeparateGemms) {
  const int saved = cpu_num_threads();
  std::mt19937 rng(21);
  struct Group {
    std::vector<DType> types;
    std::vector<int64_t> rows;
    int64_t k;
  };
  const std::vector<Group> groups = {
      {{DType::kQ4_1, DType::kQ4_1, DType::kQ4_1}, {300, 75, 75}, 576},
      {{DType::kQ4_0, DType::kQ4_0}, {150, 150}, 576},
      {{DType::kQ8_0, DType::kQ8_0, DType::kQ8_0}, {133, 67, 90}, 544},
      {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K}, {170, 45, 45}, 768},
      {{DType::kQ6_K, DType::kQ6_K}, {137, 137}, 512},
      {{DType::kQ4_1, DType::kQ8_0, DType::kQ4_0}, {9, 230, 5}, 576},
      {{DType::kQ8_0, DType::kQ8_0, DType::kQ8_0}, {3500, 3500, 100}, 576},  // 4.3 MB
  };
  for (const Group& g : groups) {
    std::vector<Tensor> ws;
    for (size_t i = 0; i < g.types.size(); ++i)
      ws.push_back(random_weight(g.rows[i], g.k, g.types[i], rng));
    const bool large = g.rows[0] > 1000;
    for (int64_t m : large ? std::vector<int64_t>{1, 3} : std::vector<int64_t>{1, 2, 5, 16}) {
      const Tensor x = random_rows(m, g.k, rng);
      std::vector<Tensor> y0;
      for (int64_t n : g.rows) y0.push_back(random_rows(m, n, rng));
      for (int threads : {1, 2}) {
        for (bool int8 : {true, false}) {
          if (!int8 && (large || m > 2)) continue;  // the f32 fallback once per group is enough
          SCOPED_TRACE(testing::Message()
                       << dtype_name(g.types[0]) << " group of " << ws.size() << " m " << m
                       << " threads " << threads << " int8 " << int8);
          set_cpu_num_threads(threads);
          const ops::GemmParams p{
              .trans_b = true, .alpha = 0.75f, .beta = 0.5f, .int8_activations = int8};
          std::vector<Tensor> grouped, alone;
          for (const Tensor& y : y0) grouped.push_back(y.clone()), alone.push_back(y.clone());
          ops::gemm_group(x, ws, grouped, p);
          for (size_t i = 0; i < ws.size(); ++i) ops::gemm(x, ws[i], alone[i], p);
          for (size_t i = 0; i < ws.size(); ++i) {
            int64_t differ = 0;
            for (int64_t j = 0; j < alone[i].numel(); ++j) {
              differ += grouped[i].data<float>()[j] != alone[i].data<float>()[j];
            }
            EXPECT_EQ(differ, 0) << "output " << i;
          }
        }
      }
    }
  }
  set_cpu_num_threads(saved);
}

TEST(GemvInt8, GroupRejectsBadArguments) {
  std::mt19937 rng(4);
  const Tensor w = random_weight(8, 64, DType::kQ4_1, rng), x = random_rows(1, 64, rng);
  const ops::GemmParams p{.trans_b = true, .int8_activations = true};
  std::vector<Tensor> ws = {w, w}, one = {Tensor::empty({1, 8}, DType::kF32)};
  EXPECT_THROW(ops::gemm_group(x, ws, one, p), InvalidArgument);  // counts differ
  std::vector<Tensor> none;
  EXPECT_THROW(ops::gemm_group(x, none, none, p), InvalidArgument);
  std::vector<Tensor> shapes = {Tensor::empty({1, 8}, DType::kF32),
                                Tensor::empty({1, 9}, DType::kF32)};
  EXPECT_THROW(ops::gemm_group(x, ws, shapes, p), InvalidArgument);
  const Tensor out = Tensor::empty({1, 8}, DType::kF32);
  std::vector<Tensor> shared = {out, out};
  EXPECT_THROW(ops::gemm_group(x, ws, shared, p), InvalidArgument);  // the same memory twice
  const Tensor square = random_weight(64, 64, DType::kQ4_1, rng);
  Tensor xa = random_rows(1, 64, rng);
  std::vector<Tensor> sq = {square}, into_a = {xa};
  EXPECT_THROW(ops::gemm_group(xa, sq, into_a, p), InvalidArgument);  // output is the input
}

TEST(GemvInt8, ModelDecodeStepWithInt8ActivationsStaysClose) {
  llm::testing::TempDir dir;
  constexpr int kDim = 64, kFf = 128, kVocab = 40;
  std::mt19937_64 rng(9);
  auto weight = [&](int64_t rows, int64_t cols, DType dt, float sd) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& x : v) x = nd(rng);
    Tensor q = Tensor::empty({rows, cols}, dt);
    ops::convert(Tensor::from_vector(v, {rows, cols}, DType::kF32), q);
    return q;
  };
  auto ones = [](int64_t n) {
    return Tensor::from_vector(std::vector<float>(static_cast<size_t>(n), 1.0f), {n}, DType::kF32);
  };
  llm::GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_int("llama.block_count", 1, llm::GgufType::kU32);
  w.set_int("llama.embedding_length", kDim, llm::GgufType::kU32);
  w.set_int("llama.feed_forward_length", kFf, llm::GgufType::kU32);
  w.set_int("llama.attention.head_count", 4, llm::GgufType::kU32);
  w.set_int("llama.attention.head_count_kv", 2, llm::GgufType::kU32);
  w.set_int("llama.context_length", 64, llm::GgufType::kU32);
  w.set_float("llama.attention.layer_norm_rms_epsilon", 1e-5);
  w.add_tensor("token_embd.weight", weight(kVocab, kDim, DType::kF32, 1.0f));
  w.add_tensor("output_norm.weight", ones(kDim));
  w.add_tensor("output.weight", weight(kVocab, kDim, DType::kQ8_0, 0.3f));
  w.add_tensor("blk.0.attn_norm.weight", ones(kDim));
  w.add_tensor("blk.0.attn_q.weight", weight(kDim, kDim, DType::kQ4_1, 0.3f));
  w.add_tensor("blk.0.attn_k.weight", weight(kDim / 2, kDim, DType::kQ4_0, 0.3f));
  w.add_tensor("blk.0.attn_v.weight", weight(kDim / 2, kDim, DType::kQ8_0, 0.3f));
  w.add_tensor("blk.0.attn_output.weight", weight(kDim, kDim, DType::kQ4_1, 0.2f));
  w.add_tensor("blk.0.ffn_norm.weight", ones(kDim));
  w.add_tensor("blk.0.ffn_gate.weight", weight(kFf, kDim, DType::kQ4_1, 0.2f));
  w.add_tensor("blk.0.ffn_up.weight", weight(kFf, kDim, DType::kQ4_1, 0.2f));
  w.add_tensor("blk.0.ffn_down.weight", weight(kDim, kFf, DType::kQ4_1, 0.2f));
  const std::string path = dir.file("int8.gguf");
  w.write(path);
  const llm::Model m = llm::Model::load(path);

  const std::vector<int32_t> prompt = {3, 17, 5, 29}, prompt_pos = {0, 1, 2, 3};
  const int32_t tok = 11, pos = 4;
  std::vector<float> logits[2];
  for (int int8 = 0; int8 < 2; ++int8) {
    llm::KvCache cache = m.make_cache();
    m.forward(prompt, prompt_pos, cache);
    const llm::DecodeArithmetic a =
        int8 == 1 ? llm::DecodeArithmetic::kInt8 : llm::DecodeArithmetic::kF32;
    const Tensor l = m.forward({&tok, 1}, {&pos, 1}, cache, {.last_only = true, .decode = a});
    logits[int8].assign(l.data<float>(), l.data<float>() + l.numel());
  }
  float worst = 0.0f, scale = 0.0f;
  for (int i = 0; i < kVocab; ++i) {
    worst = std::max(worst, std::fabs(logits[0][i] - logits[1][i]));
    scale = std::max(scale, std::fabs(logits[0][i]));
  }
  EXPECT_GT(scale, 0.1f);
  // 8-bit activations through 7 random matrices, norms and SiLU: measured 4% of the largest logit.
  EXPECT_LE(worst, 0.1f * scale);
  if (llm::testing::host_has_int8_gemv()) {
    EXPECT_GT(worst, 0.0f) << "DecodeArithmetic::kInt8 did not reach the int8 GEMV";
  } else {
    EXPECT_EQ(worst, 0.0f) << "no int8 GEMV on this host: the option must change nothing";
  }
}

}  // namespace
}  // namespace tandem
