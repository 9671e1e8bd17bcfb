// SPDX-License-Identifier: Apache-2.0
// Consistency of gemm (f32 and every weight dtype), gemm_group, batched_gemm and conv2d with the
// reference kernels.
#include <memory>
#include <tuple>
#include <vector>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

TEST(Gemm, F32ShapesAndTransposes) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1},    {1, 67, 33},    {7, 13, 19},  {33, 65, 17},
      {64, 64, 64}, {129, 70, 300}, {5, 300, 257}};
  uint32_t seed = 1;
  for (auto [m, n, k] : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        check_gemm({m, n, k, ta, tb, 1.0f, 0.0f}, DType::kF32, seed += 3);
}

TEST(Gemm, F32AlphaBeta) {
  TANDEM_OPS_PROLOGUE();
  check_gemm({9, 31, 45, false, true, 0.5f, 0.25f}, DType::kF32, 100);
  check_gemm({40, 17, 70, true, false, -2.0f, 1.0f}, DType::kF32, 110);
  check_gemm({1, 64, 64, false, false, 1.0f, -1.0f}, DType::kF32, 120);
}

TEST(Gemm, WeightDtypes) {
  TANDEM_OPS_PROLOGUE();
  // M <= 8 takes the fused GEMV path of the CPU backend, larger M the dequantized-tile path.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes = {
      {1, 67, 64}, {1, 40, 576},   {3, 45, 96},  {8, 40, 128},
      {9, 33, 64}, {17, 100, 160}, {70, 96, 256}};
  uint32_t seed = 200;
  for (DType wt : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (auto [m, n, k] : shapes) check_gemm({m, n, k, false, true, 1.0f, 0.0f}, wt, seed += 3);
    check_gemm({3, 29, 64, true, true, 0.75f, 0.5f}, wt, seed += 3);  // trans_a, GEMV path
    check_gemm({20, 29, 96, true, true, 1.0f, 1.0f}, wt, seed += 3);  // trans_a, tile path
  }
  // f16/bf16 rows need not hold whole 32-element groups.
  for (DType wt : {DType::kF16, DType::kBF16}) {
    check_gemm({1, 23, 37, false, true, 1.0f, 0.0f}, wt, seed += 3);
    check_gemm({5, 19, 45, false, true, 1.0f, 0.0f}, wt, seed += 3);
    check_gemm({12, 21, 50, false, true, 1.0f, 0.0f}, wt, seed += 3);
  }
}

TEST(Gemm, DecodeShapeOfSmolLM) {
  TANDEM_OPS_PROLOGUE();
  // The q/k/v/o and MLP projections of a 576-wide model at decode (M = 1) and a short prefill (M =
  // 12).
  for (DType wt : {DType::kQ4_1, DType::kQ8_0}) {
    check_gemm({1, 1536, 576, false, true, 1.0f, 0.0f}, wt, 300);
    check_gemm({12, 192, 576, false, true, 1.0f, 0.0f}, wt, 301);
  }
}

// gemm_group: each output as the reference gemm gives it alone (q/k/v-shaped groups of every
// weight dtype, one and several rows, alpha / beta). The int8 arithmetic has its own tolerance and
// bit-equality tests (consistency_gemv_test.cpp, tests/llm/gemv_int8_test.cpp).
TEST(GemmGroup, EachOutputAsTheReferenceGemm) {
  TANDEM_OPS_PROLOGUE();
  const int64_t k = 128;
  const std::vector<int64_t> rows = {48, 16, 16};
  uint32_t seed = 350;
  for (DType wt : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (int64_t m : {1, 3, 12}) {
      const std::string what = cat("gemm_group ", dtype_name(wt), " m=", m);
      SCOPED_TRACE(what);
      const Tensor a = random_tensor({m, k}, seed += 5);
      const ops::GemmParams p{.trans_b = true, .alpha = 0.75f, .beta = 0.5f};
      std::vector<Tensor> ws, c0s, wants, dev_ws;
      std::vector<std::unique_ptr<Guarded>> outs;
      for (int64_t n : rows) {
        ws.push_back(converted(random_tensor({n, k}, seed += 5), wt));
        c0s.push_back(random_tensor({m, n}, seed += 5));
        wants.push_back(c0s.back().clone());
        reference().gemm(a, ws.back(), wants.back(), p, nullptr);
        dev_ws.push_back(on_device(ws.back()));
        outs.push_back(std::make_unique<Guarded>(Shape{m, n}, DType::kF32, &c0s.back()));
      }
      std::vector<Tensor> views;
      for (auto& o : outs) views.push_back(o->view());
      ops::gemm_group(on_device(a), dev_ws, views, p);
      for (size_t i = 0; i < rows.size(); ++i) {
        expect_close(outs[i]->result(what), wants[i], tol::reduction(k), cat(what, " output ", i));
      }
    }
  }
}

TEST(BatchedGemm, ShapesAndTransposes) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> shapes = {
      {1, 1, 1, 1}, {3, 5, 7, 9}, {4, 33, 17, 65}, {2, 64, 64, 64}, {1, 200, 100, 300}};
  uint32_t seed = 400;
  for (auto [bt, m, n, k] : shapes) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const std::string what =
            cat("batched_gemm b=", bt, " m=", m, " n=", n, " k=", k, " ta=", ta, " tb=", tb);
        SCOPED_TRACE(what);
        const Tensor a = random_tensor(ta ? Shape{bt, k, m} : Shape{bt, m, k}, seed += 3);
        const Tensor b = random_tensor(tb ? Shape{bt, n, k} : Shape{bt, k, n}, seed + 1);
        const Tensor c0 = random_tensor({bt, m, n}, seed + 2);
        ops::GemmParams p{.trans_a = ta, .trans_b = tb, .alpha = 1.5f, .beta = ta ? 0.5f : 0.0f};
        Tensor want = c0.clone();
        reference().batched_gemm(a, b, want, p, nullptr);
        Guarded out({bt, m, n}, DType::kF32, p.beta != 0.0f ? &c0 : nullptr);
        ops::batched_gemm(on_device(a), on_device(b), out.view(), p);
        expect_close(out.result(what), want, tol::reduction(k), what);
      }
    }
  }
}

struct ConvCase {
  int64_t n, c, h, w, co, kh, kw;
  ops::Conv2dParams p;
  bool bias;
};

TEST(Conv2d, StridePadDilationGroups) {
  TANDEM_OPS_PROLOGUE();
  auto params = [](int sh, int sw, int pt, int pl, int pb, int pr, int dh, int dw, int g) {
    ops::Conv2dParams p;
    p.stride_h = sh, p.stride_w = sw, p.pad_top = pt, p.pad_left = pl, p.pad_bottom = pb,
    p.pad_right = pr;
    p.dilation_h = dh, p.dilation_w = dw, p.groups = g;
    return p;
  };
  const std::vector<ConvCase> cases = {
      {1, 1, 5, 5, 1, 3, 3, params(1, 1, 0, 0, 0, 0, 1, 1, 1), false},
      {2, 3, 9, 11, 4, 3, 3, params(1, 1, 1, 1, 1, 1, 1, 1, 1), true},
      {1, 4, 10, 10, 6, 3, 3, params(2, 2, 1, 0, 2, 1, 1, 1, 2),
       true},  // strided, asymmetric pad, 2 groups
      {1, 6, 12, 9, 6, 3, 3, params(1, 1, 2, 2, 2, 2, 2, 2, 6), true},  // dilated depthwise
      {2, 8, 7, 7, 16, 1, 1, params(1, 1, 0, 0, 0, 0, 1, 1, 1), true},  // 1x1
      {1, 3, 17, 15, 5, 5, 3, params(2, 1, 2, 1, 2, 1, 1, 2, 1),
       false},  // rectangular kernel, mixed
      {1, 16, 14, 14, 32, 3, 3, params(1, 1, 1, 1, 1, 1, 1, 1, 1), true},  // a ResNet-like block
      {1, 12, 8, 8, 12, 3, 3, params(2, 2, 1, 1, 1, 1, 1, 1, 3), false},   // grouped and strided
  };
  uint32_t seed = 500;
  for (const auto& cc : cases) {
    const std::string what = cat(
        "conv2d x [", cc.n, ",", cc.c, ",", cc.h, ",", cc.w, "] w [", cc.co, ",",
        cc.c / cc.p.groups, ",", cc.kh, ",", cc.kw, "] stride ", cc.p.stride_h, "x", cc.p.stride_w,
        " dil ", cc.p.dilation_h, "x", cc.p.dilation_w, " groups ", cc.p.groups, " bias ", cc.bias);
    SCOPED_TRACE(what);
    const Tensor x = random_tensor({cc.n, cc.c, cc.h, cc.w}, seed += 3);
    const Tensor w = random_tensor({cc.co, cc.c / cc.p.groups, cc.kh, cc.kw}, seed + 1);
    const Tensor bias = cc.bias ? random_tensor({cc.co}, seed + 2) : Tensor();
    const Shape ys = ops::conv2d_output_shape(x.shape(), w.shape(), cc.p);
    Tensor want = Tensor::empty(ys, DType::kF32);
    reference().conv2d(x, w, bias, want, cc.p, nullptr);
    Guarded out(ys, DType::kF32);
    ops::conv2d(on_device(x), on_device(w), cc.bias ? on_device(bias) : Tensor(), out.view(), cc.p);
    expect_close(out.result(what), want, tol::reduction(cc.c / cc.p.groups * cc.kh * cc.kw), what);
  }
}

}  // namespace
}  // namespace tandem::testing
