// SPDX-License-Identifier: Apache-2.0
// Shared machinery of the cross-backend consistency suite. One binary, tandem_consistency_tests,
// runs on the device that TANDEM_CONSISTENCY_DEVICE names: unset or "cpu", the default (fast) CPU
// kernels vs the reference kernels; "cuda", cuda:0 (CTest names prefixed "Cuda"), where every test
// first skips without a usable GPU (TANDEM_REQUIRE_GPU=1 makes that a failure) and suites named
// *CpuOnly are not registered.
// Inputs are made on the CPU, copied to the device with .to(), the op runs through the public ops::
// functions there, and results are copied back and compared with ops::cpu_reference_kernels() run
// on the CPU copies. Every output lives inside a larger buffer whose guard regions hold a canary
// pattern that must survive the op; the output itself starts as NaN (0xff bytes) unless the op
// reads it (beta != 0).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "tandem/core/backend.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem::testing {

// True when this run tests cuda:0 (TANDEM_CONSISTENCY_DEVICE=cuda).
inline bool testing_cuda() {
  static const bool cuda = [] {
    const char* env = std::getenv("TANDEM_CONSISTENCY_DEVICE");
    return env != nullptr && std::string(env) == "cuda";
  }();
  return cuda;
}

inline Device test_device() { return testing_cuda() ? Device::cuda(0) : Device::cpu(); }

}  // namespace tandem::testing

#define TANDEM_OPS_PROLOGUE()                                             \
  do {                                                                    \
    if (::tandem::testing::testing_cuda()) TANDEM_REQUIRE_CUDA_OR_SKIP(); \
  } while (0)

namespace tandem::testing {

inline ops::OpKernels& reference() { return ops::cpu_reference_kernels(); }

// ---------------------------------------------------------------------------------- tolerances
// The single table of tolerances: an element passes when |got - want| <= atol + rtol * |want|.
// "want" comes from the reference kernels (double accumulation), "got" from the backend under test.
struct Tol {
  double atol;
  double rtol;
};
namespace tol {
// Copies, gathers, casts (f16/bf16 round to nearest even, integer saturation), decoding of
// quantized weights, relu and binary ops: the same float operations on both sides.
inline constexpr Tol kExact{0.0, 0.0};
// silu, gelu (tanh and erf forms), exp: vectorised polynomial exp/erf vs libm in double.
inline constexpr Tol kUnary{1e-6, 1e-5};
// softmax, rms_norm, layer_norm, rope: f32 reductions and rotations vs double.
inline constexpr Tol kRow{1e-6, 2e-5};
// gemm, batched_gemm, conv2d (all weight dtypes: the weights decode exactly; only the f32
// accumulation order differs): grows with the reduction length k.
inline Tol reduction(int64_t k) { return {2e-6 * std::sqrt(static_cast<double>(k)) + 1e-6, 2e-5}; }
// attention outputs and probability rows: f32 scores, online softmax, weighted sums.
inline constexpr Tol kAttention{2e-6, 5e-5};
// f32 -> q8_0/q4_0/q4_1 compared after decoding: one quantization step of the block's range (max|x|
// of the input), in case a value sits exactly on a rounding boundary.
inline Tol quant_step(DType t, double max_abs) {
  return {t == DType::kQ8_0 ? max_abs / 127.0 * 1.01 : max_abs / 7.5, 0.0};
}
}  // namespace tol

// ---------------------------------------------------------------------------------- inputs
inline Tensor random_tensor(const Shape& shape, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
  return t;
}

// A CPU tensor of dtype t holding `src` (f32) converted by the reference kernels.
inline Tensor converted(const Tensor& src, DType t) {
  if (t == DType::kF32) return src;
  Tensor out = Tensor::empty(src.shape(), t);
  reference().convert(src, out, nullptr);
  return out;
}

inline Tensor on_device(const Tensor& host) { return host.to(test_device()); }

// ---------------------------------------------------------------------------------- guarded
// outputs
inline constexpr uint8_t kCanary = 0xA5;

class Guarded {
 public:
  // An output of `shape` and dtype t on the test device, between two guards of 64 elements. Its
  // initial contents are `init` (a CPU tensor of the same shape/dtype) or 0xff bytes.
  Guarded(const Shape& shape, DType t, const Tensor* init = nullptr) : shape_(shape), dtype_(t) {
    numel_ = shape.numel();
    Tensor host = Tensor::empty(Shape{numel_ + 2 * kGuard}, t);
    auto* bytes = static_cast<uint8_t*>(host.raw_data());
    const int64_t gb = dtype_row_bytes(t, kGuard), ob = dtype_row_bytes(t, numel_);
    std::memset(bytes, kCanary, static_cast<size_t>(gb));
    std::memset(bytes + gb + ob, kCanary, static_cast<size_t>(gb));
    if (init) {
      Tensor c = init->contiguous();
      std::memcpy(bytes + gb, c.raw_data(), static_cast<size_t>(ob));
    } else {
      std::memset(bytes + gb, 0xff, static_cast<size_t>(ob));
    }
    buffer_ = on_device(host);
    view_ = buffer_.slice(0, kGuard, kGuard + numel_).reshape(shape);
  }

  // The output tensor to pass to the op (a view into the guarded buffer, on the test device).
  Tensor& view() { return view_; }

  // Copies the buffer back, checks both guards, and returns the output as a CPU tensor.
  Tensor result(const std::string& what) const {
    Tensor host = buffer_.to(Device::cpu());
    const auto* bytes = static_cast<const uint8_t*>(host.raw_data());
    const int64_t gb = dtype_row_bytes(dtype_, kGuard), ob = dtype_row_bytes(dtype_, numel_);
    int64_t bad = 0;
    for (int64_t i = 0; i < gb; ++i) bad += (bytes[i] != kCanary) + (bytes[gb + ob + i] != kCanary);
    EXPECT_EQ(bad, 0) << what << ": " << bad << " guard bytes around the output were overwritten";
    return host.slice(0, kGuard, kGuard + numel_).reshape(shape_);
  }

 private:
  static constexpr int64_t kGuard = 64;
  Shape shape_;
  DType dtype_;
  int64_t numel_ = 0;
  Tensor buffer_, view_;
};

// ---------------------------------------------------------------------------------- comparison
inline void expect_close(const Tensor& got, const Tensor& want, Tol tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<float> g = got.to_float_vector(), w = want.to_float_vector();
  int64_t failures = 0, first = -1;
  double worst = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double a = g[i], b = w[i];
    bool ok;
    if (std::isnan(b)) {
      ok = std::isnan(a);
    } else if (std::isinf(b)) {
      ok = a == b;
    } else {
      const double err = std::fabs(a - b), allowed = tol.atol + tol.rtol * std::fabs(b);
      ok = err <= allowed;  // false for NaN a
      if (!std::isnan(a) && allowed > 0) worst = std::max(worst, err / allowed);
    }
    if (!ok) {
      if (first < 0) first = static_cast<int64_t>(i);
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << g.size()
                         << " elements outside atol " << tol.atol << " rtol " << tol.rtol
                         << "; first at flat index " << first << ": got "
                         << (first >= 0 ? g[first] : 0.0f) << ", want "
                         << (first >= 0 ? w[first] : 0.0f) << " (worst error / allowed: " << worst
                         << ")";
}

// ---------------------------------------------------------------------------------- gemm
struct GemmCase {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

// ops::gemm on the test device against the reference, B converted to dtype wt.
inline void check_gemm(const GemmCase& g, DType wt, uint32_t seed) {
  const std::string what = cat("gemm ", dtype_name(wt), " m=", g.m, " n=", g.n, " k=", g.k,
                               " ta=", g.ta, " tb=", g.tb, " alpha=", g.alpha, " beta=", g.beta);
  SCOPED_TRACE(what);
  const Tensor a = random_tensor(g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, seed);
  const Tensor b = converted(random_tensor(g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, seed + 1), wt);
  const Tensor c0 = random_tensor({g.m, g.n}, seed + 2);
  ops::GemmParams p{.trans_a = g.ta, .trans_b = g.tb, .alpha = g.alpha, .beta = g.beta};
  Tensor want = c0.clone();
  reference().gemm(a, b, want, p, nullptr);
  Guarded out({g.m, g.n}, DType::kF32, g.beta != 0.0f ? &c0 : nullptr);
  ops::gemm(on_device(a), on_device(b), out.view(), p);
  expect_close(out.result(what), want, tol::reduction(g.k), what);
}

}  // namespace tandem::testing
