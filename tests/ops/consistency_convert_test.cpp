// SPDX-License-Identifier: Apache-2.0
// Consistency of convert with the reference kernels: float casts with special values, quantization
// to q8_0/q4_0/q4_1 and back, integer casts (rounding, saturation, u4), strided same-dtype copies
// (the path of Tensor::clone/contiguous) and a strided source converted to another dtype. Also: ops
// enqueued on a stream of the device give the synchronous results.
#include <limits>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

Tensor run_convert(const Tensor& src, DType dt, const std::string& what) {
  Guarded out(src.shape(), dt);
  ops::convert(on_device(src), out.view());
  return out.result(what);
}

Tensor special_values() {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          inf,
                          -inf,
                          nan,
                          65504.0f,
                          65520.0f,
                          70000.0f,
                          -1e9f,
                          1e-8f,
                          5.96e-8f,
                          2.98e-8f,
                          6.1e-5f,
                          1.0f + 1.0f / 2048.0f,
                          1.0f + 3.0f / 2048.0f,
                          1.0f + 1.0f / 256.0f,
                          1.0f + 3.0f / 256.0f,
                          1e-40f,
                          3.4e38f,
                          0.333333f,
                          300.5f,
                          -2.5f,
                          2.5f,
                          3.5f,
                          127.6f,
                          -128.4f,
                          255.5f,
                          15.5f,
                          2147483648.0f};
  while (v.size() % 32 != 0) v.push_back(static_cast<float>(v.size()) * 0.37f - 5.0f);
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}, DType::kF32);
}

TEST(Convert, FloatCastsWithSpecialValues) {
  TANDEM_OPS_PROLOGUE();
  const Tensor x = special_values();
  for (DType t : {DType::kF16, DType::kBF16}) {
    const std::string what = cat("convert f32 -> ", dtype_name(t));
    Tensor want = Tensor::empty(x.shape(), t);
    reference().convert(x, want, nullptr);
    const Tensor got = run_convert(x, t, what);
    expect_close(got, want, tol::kExact, what);
    // And back to f32 (exact).
    Tensor back_want = Tensor::empty(x.shape(), DType::kF32);
    reference().convert(want, back_want, nullptr);
    expect_close(run_convert(want, DType::kF32, what + " back"), back_want, tol::kExact,
                 what + " -> f32");
  }
  // Long random rows cover the vector bodies and tails.
  const Tensor r = random_tensor({3, 1001}, 5, -100.0f, 100.0f);
  for (DType t : {DType::kF16, DType::kBF16}) {
    Tensor want = Tensor::empty(r.shape(), t);
    reference().convert(r, want, nullptr);
    expect_close(run_convert(r, t, "random"), want, tol::kExact,
                 cat("random f32 -> ", dtype_name(t)));
  }
  // f16 <-> bf16.
  const Tensor h = converted(r, DType::kF16);
  Tensor want = Tensor::empty(r.shape(), DType::kBF16);
  reference().convert(h, want, nullptr);
  expect_close(run_convert(h, DType::kBF16, "f16->bf16"), want, tol::kExact, "f16 -> bf16");
}

TEST(Convert, QuantizeAndDequantize) {
  TANDEM_OPS_PROLOGUE();
  uint32_t seed = 20;
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    for (const Shape& s : {Shape{32}, Shape{3, 96}, Shape{5, 1024}, Shape{2, 3, 64}}) {
      const std::string what = cat("convert f32 -> ", dtype_name(t), " ", s.to_string());
      SCOPED_TRACE(what);
      Tensor x = random_tensor(s, seed += 2, -3.0f, 3.0f);
      x.data<float>()[0] = 0.0f;
      Tensor want = Tensor::empty(s, t);
      reference().convert(x, want, nullptr);
      const Tensor got = run_convert(x, t, what);
      expect_close(got, want, tol::quant_step(t, 3.0), what);
      // Every backend mirrors the reference quantization bit for bit (explicitly rounded float
      // operations on CUDA); scales included (CUDA once wrote them with the low byte zeroed).
      EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), static_cast<size_t>(want.nbytes())), 0)
          << what;
      // Dequantize (exact: d * q (+ m) on both sides).
      Tensor deq = Tensor::empty(s, DType::kF32);
      reference().convert(want, deq, nullptr);
      expect_close(run_convert(want, DType::kF32, what + " back"), deq, tol::kExact,
                   what + " -> f32");
    }
  }
  // Constant blocks (zero scale) and a block whose largest magnitude is negative.
  std::vector<float> v(96, 0.0f);
  for (int i = 32; i < 64; ++i) v[i] = 1.25f;
  for (int i = 64; i < 96; ++i) v[i] = static_cast<float>(i - 70) * 0.1f;
  v[70] = -7.0f;
  const Tensor x = Tensor::from_vector(v, {96}, DType::kF32);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    Tensor want = Tensor::empty(x.shape(), t);
    reference().convert(x, want, nullptr);
    expect_close(run_convert(x, t, "edge blocks"), want, tol::quant_step(t, 7.0),
                 cat("edge blocks ", dtype_name(t)));
  }
}

TEST(Convert, IntegerCasts) {
  TANDEM_OPS_PROLOGUE();
  const Tensor x = special_values();
  for (DType t : {DType::kI8, DType::kU8, DType::kU4, DType::kI32, DType::kI64}) {
    const std::string what = cat("convert f32 -> ", dtype_name(t));
    Tensor want = Tensor::empty(x.shape(), t);
    reference().convert(x, want, nullptr);
    const Tensor got = run_convert(x, t, what);
    expect_close(got, want, tol::kExact, what);
    for (DType back : {DType::kF32, DType::kI32, DType::kU4, DType::kI8, DType::kF16}) {
      if (back == t) continue;
      Tensor w2 = Tensor::empty(x.shape(), back);
      reference().convert(want, w2, nullptr);
      expect_close(run_convert(want, back, what), w2, tol::kExact,
                   cat(what, " -> ", dtype_name(back)));
    }
  }
}

TEST(Convert, StridedCopies) {
  TANDEM_OPS_PROLOGUE();
  const Tensor base = random_tensor({6, 4, 64}, 40, -50.0f, 50.0f);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kI8, DType::kI64, DType::kU8}) {
    const Tensor typed = converted(base, t);
    // Views: transpose of the leading dims, a slice, a permutation that moves the last dim, a
    // select.
    const std::vector<std::pair<std::string, Tensor>> views = {
        {"transpose(0,1)", typed.transpose(0, 1)},
        {"slice(1,1,3)", typed.slice(1, 1, 3)},
        {"permute(2,0,1)", typed.permute({2, 0, 1})},
        {"select(2,5)", typed.select(2, 5)},
        {"slice(2,3,40).transpose(0,2)", typed.slice(2, 3, 40).transpose(0, 2)}};
    for (const auto& [name, view] : views) {
      const std::string what = cat("strided copy ", dtype_name(t), " ", name);
      Tensor want = Tensor::empty(view.shape(), t);
      reference().convert(view, want, nullptr);
      Guarded out(view.shape(), t);
      ops::convert(view.to(test_device()), out.view());  // .to() of a view copies it densely first
      expect_close(out.result(what), want, tol::kExact, what);
    }
  }
  if (test_device().is_cpu()) {
    // On the CPU the strided source reaches the kernel itself (a device copy would densify it
    // first).
    for (DType t : {DType::kF32, DType::kF16, DType::kQ8_0, DType::kQ4_1}) {
      const Tensor typed = converted(random_tensor({3, 4, 64}, 41), t);
      const Tensor view = typed.permute({1, 0, 2});  // rows stay dense for the block types
      Tensor want = Tensor::empty(view.shape(), t);
      reference().convert(view, want, nullptr);
      Guarded out(view.shape(), t);
      ops::convert(view, out.view());
      expect_close(out.result("strided"), want, tol::kExact, cat("strided view ", dtype_name(t)));
      // clone() of a view goes through the same kernel.
      expect_close(view.clone(), want, tol::kExact, cat("clone of view ", dtype_name(t)));
    }
    // A strided f32 source converted to f16 and to q8_0.
    const Tensor src = random_tensor({64, 4}, 42).transpose(0, 1);
    for (DType t : {DType::kF16, DType::kQ8_0}) {
      Tensor want = Tensor::empty(src.shape(), t);
      reference().convert(src, want, nullptr);
      Guarded out(src.shape(), t);
      ops::convert(src, out.view());
      expect_close(out.result("strided convert"), want, tol::kExact,
                   cat("strided f32 -> ", dtype_name(t)));
    }
  }
}

TEST(Streams, EnqueuedOpsMatchSynchronousOnes) {
  TANDEM_OPS_PROLOGUE();
  const Tensor a = on_device(random_tensor({9, 48}, 60)),
               w = on_device(converted(random_tensor({40, 64}, 61), DType::kQ4_1));
  const Tensor b = on_device(random_tensor({48, 64}, 62));
  Tensor c_sync = Tensor::empty({9, 64}, DType::kF32, test_device());
  Tensor s_sync = Tensor::empty({9, 64}, DType::kF32, test_device());
  Tensor g_sync = Tensor::empty({9, 40}, DType::kF32, test_device());
  ops::gemm(a, b, c_sync);
  ops::softmax(c_sync, s_sync);
  ops::gemm(s_sync, w, g_sync, {.trans_b = true});

  auto stream = create_stream(test_device());
  Tensor c = Tensor::empty({9, 64}, DType::kF32, test_device());
  Tensor s = Tensor::empty({9, 64}, DType::kF32, test_device());
  Tensor g = Tensor::empty({9, 40}, DType::kF32, test_device());
  ops::gemm(a, b, c, {}, stream.get());
  ops::softmax(c, s, stream.get());
  ops::gemm(s, w, g, {.trans_b = true}, stream.get());
  stream->synchronize();
  expect_close(g.to(Device::cpu()), g_sync.to(Device::cpu()), tol::kExact,
               "stream gemm/softmax/gemm");
}

}  // namespace
}  // namespace tandem::testing
