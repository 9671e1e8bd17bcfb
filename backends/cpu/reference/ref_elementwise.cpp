// SPDX-License-Identifier: Apache-2.0
// Reference row-wise and elementwise ops: softmax, RMSNorm, LayerNorm, RoPE, unary activations and
// broadcasting binary ops. Every reduction and transcendental is evaluated in double.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference.h"

namespace tandem::cpu::ref {
namespace {

int64_t last_dim(const Tensor& t) { return t.rank() == 0 ? 1 : t.size(-1); }

}  // namespace

void softmax(const Tensor& x, Tensor& y) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  std::vector<double> e(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * n;
    double mx = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(xr[j]));
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += e[j] = std::exp(static_cast<double>(xr[j]) - mx);
    for (int64_t j = 0; j < n; ++j) yp[r * n + j] = static_cast<float>(e[j] / sum);
  }
}

void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const ops::NormParams& p) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  float* yp = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(xp[r * n + j]) * xp[r * n + j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + p.eps);
    for (int64_t j = 0; j < n; ++j) yp[r * n + j] = static_cast<float>(xp[r * n + j] * inv * wp[j]);
  }
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                const ops::NormParams& p) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  float* yp = y.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * n;
    double mean = 0.0;
    for (int64_t j = 0; j < n; ++j) mean += xr[j];
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(n);
    const double inv = 1.0 / std::sqrt(var + p.eps);
    for (int64_t j = 0; j < n; ++j) {
      const double v = (xr[j] - mean) * inv * wp[j] + (bp ? bp[j] : 0.0);
      yp[r * n + j] = static_cast<float>(v);
    }
  }
}

void rope(const Tensor& x, const Tensor& pos, Tensor& y, const ops::RopeParams& p) {
  const int64_t t = x.size(0), h = x.size(1), d = x.size(2);
  const int64_t rd = p.rotary_dim < 0 ? d : p.rotary_dim, half = rd / 2;
  const float* xp = x.data<float>();
  const int32_t* pp = pos.data<int32_t>();
  float* yp = y.data<float>();
  std::vector<double> row(static_cast<size_t>(d));
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* xr = xp + (i * h + hh) * d;
      for (int64_t j = 0; j < d; ++j) row[j] = xr[j];  // copy first: y may alias x
      float* yr = yp + (i * h + hh) * d;
      for (int64_t j = 0; j < d; ++j) yr[j] = static_cast<float>(row[j]);
      for (int64_t f = 0; f < half; ++f) {
        // Pair f rotates by pos * theta^(-2f / rd).
        const double freq =
            std::pow(static_cast<double>(p.theta), -2.0 * f / static_cast<double>(rd));
        const double ang = static_cast<double>(pp[i]) * freq, c = std::cos(ang), s = std::sin(ang);
        const int64_t i0 = p.neox ? f : 2 * f, i1 = p.neox ? f + half : 2 * f + 1;
        yr[i0] = static_cast<float>(row[i0] * c - row[i1] * s);
        yr[i1] = static_cast<float>(row[i0] * s + row[i1] * c);
      }
    }
  }
}

void unary(ops::UnaryOp op, const Tensor& x, Tensor& y) {
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  constexpr double kSqrt2OverPi = 0.79788456080286535588, kInvSqrt2 = 0.70710678118654752440;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = xp[i];
    double r = 0.0;
    switch (op) {
      case ops::UnaryOp::kSilu:
        r = v / (1.0 + std::exp(-v));
        break;
      case ops::UnaryOp::kGelu:
        r = 0.5 * v * (1.0 + std::tanh(kSqrt2OverPi * (v + 0.044715 * v * v * v)));
        break;
      case ops::UnaryOp::kGeluErf:
        r = 0.5 * v * (1.0 + std::erf(v * kInvSqrt2));
        break;
      case ops::UnaryOp::kRelu:
        r = v > 0.0 ? v : 0.0;
        break;
      case ops::UnaryOp::kExp:
        r = std::exp(v);
        break;
    }
    yp[i] = static_cast<float>(r);
  }
}

void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  const float *ap = a.data<float>(), *bp = b.data<float>();
  float* yp = y.data<float>();
  const int64_t nb = b.numel();  // b repeats every nb elements of a (nb == 1: a scalar)
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float u = ap[i], v = bp[i % nb];
    switch (op) {
      case ops::BinaryOp::kAdd:
        yp[i] = u + v;
        break;
      case ops::BinaryOp::kMul:
        yp[i] = u * v;
        break;
      case ops::BinaryOp::kSub:
        yp[i] = u - v;
        break;
    }
  }
}

}  // namespace tandem::cpu::ref
