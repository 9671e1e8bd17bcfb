// SPDX-License-Identifier: Apache-2.0
// Reference paged attention: for each (query, head), the visible slots of the head's pages are
// scored in double precision, softmaxed with the maximum subtracted, and their V rows averaged.
#include <cmath>
#include <vector>

#include "reference/reference.h"
#include "tandem/core/dtype.h"

namespace tandem::cpu::ref {
namespace {

double element(const Tensor& rows, int64_t slot, int64_t j, int64_t d) {
  if (rows.dtype() == DType::kF16) {
    return f16_to_f32(static_cast<const uint16_t*>(rows.raw_data())[slot * d + j]);
  }
  return static_cast<const float*>(rows.raw_data())[slot * d + j];
}

}  // namespace

void paged_attention(const Tensor& q, std::span<const int32_t> q_positions, const ops::PagedKv& kv,
                     Tensor& out, float scale) {
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2);
  const auto hkv = static_cast<int64_t>(kv.heads.size());
  const int64_t group = hq / hkv;
  const float* qd = q.data<float>();
  float* od = out.data<float>();
  std::vector<double> scores, acc(static_cast<size_t>(d));
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      const std::vector<ops::KvPage>& pages = kv.heads[h / group];
      const float* qr = qd + (i * hq + h) * d;
      scores.clear();
      double m = -INFINITY;
      for (const ops::KvPage& pg : pages) {
        for (int32_t s = 0; s < pg.used; ++s) {
          if (pg.positions[s] > q_positions[i]) continue;
          double dot = 0.0;
          for (int64_t j = 0; j < d; ++j) dot += double{qr[j]} * element(*pg.k, s, j, d);
          scores.push_back(dot * scale);
          m = std::max(m, scores.back());
        }
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      double sum = 0.0;
      size_t n = 0;
      for (const ops::KvPage& pg : pages) {
        for (int32_t s = 0; s < pg.used; ++s) {
          if (pg.positions[s] > q_positions[i]) continue;
          const double e = std::exp(scores[n++] - m);
          sum += e;
          for (int64_t j = 0; j < d; ++j) acc[j] += e * element(*pg.v, s, j, d);
        }
      }
      float* orow = od + (i * hq + h) * d;
      for (int64_t j = 0; j < d; ++j) orow[j] = sum > 0.0 ? static_cast<float>(acc[j] / sum) : 0.0f;
    }
  }
}

}  // namespace tandem::cpu::ref
