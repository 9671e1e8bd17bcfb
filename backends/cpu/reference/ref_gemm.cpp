// SPDX-License-Identifier: Apache-2.0
// Reference GEMM and batched GEMM: one double-precision dot product per output element. Weights of
// any weight dtype are decoded element by element through load_value().
#include <cstdint>
#include <vector>

#include "reference.h"

namespace tandem::cpu::ref {
namespace {

// c = alpha * op(a) op(b) + beta * c for one matrix. `b_row(n, out)` writes column n of op(b) (K
// values).
template <class BColumn>
void gemm_one(const float* a, bool trans_a, float* c, int64_t m, int64_t n, int64_t k,
              const ops::GemmParams& p, BColumn&& b_column) {
  std::vector<double> bcol(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    b_column(j, bcol.data());
    for (int64_t i = 0; i < m; ++i) {
      double acc = 0.0;
      for (int64_t l = 0; l < k; ++l) {
        const double av = trans_a ? a[l * m + i] : a[i * k + l];
        acc += av * bcol[l];
      }
      double r = static_cast<double>(p.alpha) * acc;
      if (p.beta != 0.0f) r += static_cast<double>(p.beta) * c[i * n + j];
      c[i * n + j] = static_cast<float>(r);
    }
  }
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p) {
  const int64_t m = c.size(0), n = c.size(1);
  const int64_t k = p.trans_a ? a.size(0) : a.size(1);
  const DType bt = b.dtype();
  const auto* bbase = static_cast<const uint8_t*>(b.raw_data());
  const int64_t b_row_bytes = dtype_row_bytes(bt, b.size(1));
  gemm_one(a.data<float>(), p.trans_a, c.data<float>(), m, n, k, p, [&](int64_t j, double* col) {
    for (int64_t l = 0; l < k; ++l) {
      // trans_b: b is [N, K], column j of op(b) is row j of b; otherwise b is f32 [K, N].
      col[l] =
          p.trans_b ? load_value(bt, bbase + j * b_row_bytes, l) : load_value(bt, bbase, l * n + j);
    }
  });
}

void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p) {
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2);
  const int64_t k = p.trans_a ? a.size(1) : a.size(2);
  for (int64_t i = 0; i < batch; ++i) {
    const float* bb = b.data<float>() + i * k * n;
    gemm_one(a.data<float>() + i * m * k, p.trans_a, c.data<float>() + i * m * n, m, n, k, p,
             [&](int64_t j, double* col) {
               for (int64_t l = 0; l < k; ++l) col[l] = p.trans_b ? bb[j * k + l] : bb[l * n + j];
             });
  }
}

}  // namespace tandem::cpu::ref
