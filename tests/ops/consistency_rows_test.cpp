// SPDX-License-Identifier: Apache-2.0
// Consistency of the row-wise and elementwise ops: softmax, rms_norm, layer_norm, rope, unary,
// binary, embedding (every table dtype) with the reference kernels, including in-place use where
// allowed.
#include <random>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

const std::vector<Shape>& row_shapes() {
  static const std::vector<Shape> shapes = {{1},      {7},          {3, 17},  {5, 100},
                                            {4, 576}, {2, 3, 1001}, {1, 4096}};
  return shapes;
}

TEST(Softmax, Shapes) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 10;
  for (const Shape& s : row_shapes()) {
    for (float range : {1.0f, 40.0f}) {  // large logits check the max subtraction
      const std::string what = cat("softmax ", s.to_string(), " range ", range);
      SCOPED_TRACE(what);
      const Tensor x = random_tensor(s, seed += 2, -range, range);
      Tensor want = Tensor::empty(s, DType::kF32);
      reference().softmax(x, want, nullptr);
      Guarded out(s, DType::kF32);
      ops::softmax(on_device(x), out.view());
      expect_close(out.result(what), want, tol::kRow, what);
    }
  }
}

TEST(Softmax, InPlace) {
  TANDEM_OPS_PROLOGUE();
  const Tensor x = random_tensor({6, 333}, 77, -5.0f, 5.0f);
  Tensor want = Tensor::empty(x.shape(), DType::kF32);
  reference().softmax(x, want, nullptr);
  Tensor d = on_device(x);
  ops::softmax(d, d);
  expect_close(d.to(Device::cpu()), want, tol::kRow, "softmax in place");
}

TEST(RmsNorm, Shapes) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 30;
  for (const Shape& s : row_shapes()) {
    for (float eps : {1e-5f, 1e-2f}) {
      const std::string what = cat("rms_norm ", s.to_string(), " eps ", eps);
      SCOPED_TRACE(what);
      const Tensor x = random_tensor(s, seed += 2, -3.0f, 3.0f);
      const Tensor w = random_tensor({s[-1]}, seed + 1, 0.5f, 1.5f);
      Tensor want = Tensor::empty(s, DType::kF32);
      reference().rms_norm(x, w, want, {.eps = eps}, nullptr);
      Guarded out(s, DType::kF32);
      ops::rms_norm(on_device(x), on_device(w), out.view(), {.eps = eps});
      expect_close(out.result(what), want, tol::kRow, what);
    }
  }
  // In place.
  const Tensor x = random_tensor({3, 576}, 91);
  const Tensor w = random_tensor({576}, 92);
  Tensor want = Tensor::empty(x.shape(), DType::kF32);
  reference().rms_norm(x, w, want, {}, nullptr);
  Tensor d = on_device(x);
  ops::rms_norm(d, on_device(w), d);
  expect_close(d.to(Device::cpu()), want, tol::kRow, "rms_norm in place");
}

TEST(LayerNorm, ShapesWithAndWithoutBias) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 50;
  for (const Shape& s : row_shapes()) {
    for (bool with_bias : {false, true}) {
      const std::string what = cat("layer_norm ", s.to_string(), " bias ", with_bias);
      SCOPED_TRACE(what);
      const Tensor x =
          random_tensor(s, seed += 3, 2.0f, 4.0f);  // a large mean checks the two-pass variance
      const Tensor w = random_tensor({s[-1]}, seed + 1, 0.5f, 1.5f);
      const Tensor b = with_bias ? random_tensor({s[-1]}, seed + 2) : Tensor();
      Tensor want = Tensor::empty(s, DType::kF32);
      reference().layer_norm(x, w, b, want, {.eps = 1e-5f}, nullptr);
      Guarded out(s, DType::kF32);
      ops::layer_norm(on_device(x), on_device(w), with_bias ? on_device(b) : Tensor(), out.view(),
                      {.eps = 1e-5f});
      // Rows of one element normalise to exactly zero; compare with an absolute floor.
      expect_close(out.result(what), want, {1e-5, 2e-5}, what);
    }
  }
}

TEST(Rope, InterleavedAndNeox) {
  TANDEM_OPS_PROLOGUE();
  struct Case {
    int64_t t, h, d;
    int rotary;
    float theta;
  };
  const std::vector<Case> cases = {{1, 1, 2, -1, 10000.0f},  {5, 3, 64, -1, 10000.0f},
                                   {7, 2, 80, 32, 10000.0f}, {3, 4, 18, -1, 500000.0f},
                                   {9, 9, 64, -1, 10000.0f}, {4, 2, 128, 64, 1e6f}};
  uint32_t seed = 70;
  for (const Case& c : cases) {
    for (bool neox : {false, true}) {
      const std::string what =
          cat("rope t=", c.t, " h=", c.h, " d=", c.d, " rotary=", c.rotary, " neox=", neox);
      SCOPED_TRACE(what);
      const Tensor x = random_tensor({c.t, c.h, c.d}, seed += 2);
      std::vector<int32_t> pos(static_cast<size_t>(c.t));
      std::mt19937 rng(seed);
      for (auto& p : pos) p = static_cast<int32_t>(rng() % 5000);
      pos[0] = 0;
      const Tensor positions = Tensor::from_vector(pos, {c.t}, DType::kI32);
      ops::RopeParams p{.theta = c.theta, .rotary_dim = c.rotary, .neox = neox};
      Tensor want = Tensor::empty(x.shape(), DType::kF32);
      reference().rope(x, positions, want, p, nullptr);
      Guarded out(x.shape(), DType::kF32);
      ops::rope(on_device(x), on_device(positions), out.view(), p);
      expect_close(out.result(what), want, tol::kRow, what);
      Tensor d = on_device(x);  // in place
      ops::rope(d, on_device(positions), d, p);
      expect_close(d.to(Device::cpu()), want, tol::kRow, what + " in place");
    }
  }
}

TEST(Unary, AllOpsAndSizes) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<std::pair<ops::UnaryOp, const char*>> ops_list = {
      {ops::UnaryOp::kSilu, "silu"},
      {ops::UnaryOp::kGelu, "gelu"},
      {ops::UnaryOp::kGeluErf, "gelu_erf"},
      {ops::UnaryOp::kRelu, "relu"},
      {ops::UnaryOp::kExp, "exp"}};
  uint32_t seed = 90;
  for (auto [op, name] : ops_list) {
    for (int64_t n : {1, 15, 16, 17, 1000, 70001}) {
      const std::string what = cat(name, " n=", n);
      SCOPED_TRACE(what);
      const float range = op == ops::UnaryOp::kExp ? 20.0f : 10.0f;
      const Tensor x = random_tensor({n}, seed += 2, -range, range);
      Tensor want = Tensor::empty(x.shape(), DType::kF32);
      reference().unary(op, x, want, nullptr);
      Guarded out(x.shape(), DType::kF32);
      ops::unary(op, on_device(x), out.view());
      expect_close(out.result(what), want, op == ops::UnaryOp::kRelu ? tol::kExact : tol::kUnary,
                   what);
    }
  }
  const Tensor x = random_tensor({3, 45}, 99, -4.0f, 4.0f);  // in place
  Tensor want = Tensor::empty(x.shape(), DType::kF32);
  reference().unary(ops::UnaryOp::kSilu, x, want, nullptr);
  Tensor d = on_device(x);
  ops::silu(d, d);
  expect_close(d.to(Device::cpu()), want, tol::kUnary, "silu in place");
}

TEST(Binary, Broadcasting) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{5, 7}, {7}},         {{5, 7}, {1}},    {{5, 7}, {5, 7}},   {{2, 3, 4, 33}, {4, 33}},
      {{2, 3, 4, 33}, {33}}, {{1000, 3}, {3}}, {{70001}, {70001}}, {{4, 9}, {1, 1}}};
  uint32_t seed = 110;
  for (auto op : {ops::BinaryOp::kAdd, ops::BinaryOp::kMul, ops::BinaryOp::kSub}) {
    for (const auto& [as, bs] : shapes) {
      const std::string what =
          cat("binary ", static_cast<int>(op), " a ", as.to_string(), " b ", bs.to_string());
      SCOPED_TRACE(what);
      const Tensor a = random_tensor(as, seed += 2), b = random_tensor(bs, seed + 1);
      Tensor want = Tensor::empty(as, DType::kF32);
      reference().binary(op, a, b, want, nullptr);
      Guarded out(as, DType::kF32);
      ops::binary(op, on_device(a), on_device(b), out.view());
      expect_close(out.result(what), want, tol::kExact, what);
    }
  }
  const Tensor a = random_tensor({6, 10}, 120), b = random_tensor({10}, 121);  // in place
  Tensor want = Tensor::empty(a.shape(), DType::kF32);
  reference().binary(ops::BinaryOp::kMul, a, b, want, nullptr);
  Tensor d = on_device(a);
  ops::mul(d, on_device(b), d);
  expect_close(d.to(Device::cpu()), want, tol::kExact, "mul in place");
}

TEST(Embedding, EveryTableDtype) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 130;
  for (DType t :
       {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (int64_t d : {32, 64, 576}) {
      for (int64_t n : {1, 13}) {
        const std::string what = cat("embedding ", dtype_name(t), " d=", d, " ids=", n);
        SCOPED_TRACE(what);
        const int64_t v = 50;
        const Tensor table = converted(random_tensor({v, d}, seed += 2), t);
        std::vector<int32_t> id(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) id[i] = static_cast<int32_t>((i * 17 + seed) % v);
        id[0] = static_cast<int32_t>(v - 1);
        const Tensor ids = Tensor::from_vector(id, {n}, DType::kI32);
        Tensor want = Tensor::empty({n, d}, DType::kF32);
        reference().embedding(table, ids, want, nullptr);
        Guarded out({n, d}, DType::kF32);
        ops::embedding(on_device(table), on_device(ids), out.view());
        expect_close(out.result(what), want, tol::kExact, what);
      }
    }
  }
  for (DType t : {DType::kF16, DType::kBF16}) {  // rows that are not whole 32-element groups
    const Tensor table = converted(random_tensor({9, 37}, 150), t);
    const Tensor ids = Tensor::from_vector(std::vector<int32_t>{8, 0, 3}, {3}, DType::kI32);
    Tensor want = Tensor::empty({3, 37}, DType::kF32);
    reference().embedding(table, ids, want, nullptr);
    Guarded out({3, 37}, DType::kF32);
    ops::embedding(on_device(table), on_device(ids), out.view());
    expect_close(out.result("embedding d=37"), want, tol::kExact,
                 cat("embedding ", dtype_name(t), " d=37"));
  }
}

TEST(Embedding, OutOfRangeIdsThrow) {
  TANDEM_OPS_PROLOGUE();
  const Tensor table = on_device(random_tensor({10, 32}, 160));
  Tensor out = Tensor::empty({2, 32}, DType::kF32, test_device());
  for (int32_t bad : {-1, 10, 1 << 30}) {
    const Tensor ids =
        on_device(Tensor::from_vector(std::vector<int32_t>{3, bad}, {2}, DType::kI32));
    EXPECT_THROW(ops::embedding(table, ids, out), InvalidArgument) << "id " << bad;
  }
}

}  // namespace
}  // namespace tandem::testing
