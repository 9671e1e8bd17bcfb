// SPDX-License-Identifier: Apache-2.0
// Reference attention: for each query head and row, the scaled scores against every visible key, an
// exact softmax in double and the probability-weighted sum of values. Query head h reads KV head h
// / (Hq / Hkv).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference.h"

namespace tandem::cpu::ref {

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const ops::AttentionParams& p, Tensor* probs) {
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t tk = k.size(0), hkv = k.size(1), dv = v.size(2), group = hq / hkv;
  const float *qp = q.data<float>(), *kp = k.data<float>(), *vp = v.data<float>();
  float* op = out.data<float>();
  // Row i of the output for head h lands at probs[h, r, :] for every r with prob_rows[r] == i.
  float* pp = probs ? probs->data<float>() : nullptr;
  const int64_t nrows = static_cast<int64_t>(p.prob_rows.size());
  std::vector<double> score(static_cast<size_t>(tk));
  for (int64_t h = 0; h < hq; ++h) {
    const int64_t g = h / group;
    for (int64_t i = 0; i < tq; ++i) {
      // Keys visible to row i: all of them, or j <= q_offset + i when causal.
      const int64_t visible = p.causal ? std::min(tk, p.q_offset + i + 1) : tk;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < visible; ++j) {
        double dot = 0.0;
        for (int64_t c = 0; c < d; ++c)
          dot += static_cast<double>(qp[(i * hq + h) * d + c]) * kp[(j * hkv + g) * d + c];
        score[j] = dot * p.scale;
        mx = std::max(mx, score[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < visible; ++j) sum += score[j] = std::exp(score[j] - mx);
      for (int64_t c = 0; c < dv; ++c) {
        double acc = 0.0;
        for (int64_t j = 0; j < visible; ++j) acc += score[j] * vp[(j * hkv + g) * dv + c];
        op[(i * hq + h) * dv + c] = visible > 0 ? static_cast<float>(acc / sum) : 0.0f;
      }
      for (int64_t r = 0; r < nrows; ++r) {
        if (p.prob_rows[r] != i) continue;
        float* pr = pp + (h * nrows + r) * tk;
        for (int64_t j = 0; j < tk; ++j)
          pr[j] = j < visible ? static_cast<float>(score[j] / sum) : 0.0f;
      }
    }
  }
}

}  // namespace tandem::cpu::ref
