// SPDX-License-Identifier: Apache-2.0
// Fast CPU paged attention: parallel over (query, KV head) pairs; the query heads of one GQA group
// share each K/V row read; online softmax per page, float accumulation. (The LLM engine's CPU path
// calls its own fused kernel in src/llm/model_attention.cpp; this one serves every other caller.)
#include <algorithm>
#include <cmath>
#include <vector>

#include "fast/fast_ops.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"

namespace tandem::cpu::fast {
namespace {

void load_row(const Tensor& rows, int64_t slot, int64_t d, float* dst) {
  if (rows.dtype() == DType::kF16) {
    const uint16_t* src = static_cast<const uint16_t*>(rows.raw_data()) + slot * d;
    for (int64_t j = 0; j < d; ++j) dst[j] = f16_to_f32(src[j]);
  } else {
    const float* src = static_cast<const float*>(rows.raw_data()) + slot * d;
    std::copy(src, src + d, dst);
  }
}

}  // namespace

void paged_attention(const Tensor& q, std::span<const int32_t> q_positions, const ops::PagedKv& kv,
                     const Tensor& out, float scale) {
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2);
  const auto hkv = static_cast<int64_t>(kv.heads.size());
  const int64_t group = hq / hkv;
  int64_t slots = 0;
  for (const auto& pages : kv.heads)
    for (const ops::KvPage& pg : pages) slots += pg.used;
  const int threads = parallel_threads(tq * slots * d * 2 * group, 0, cpu_num_threads());
  const float* qd = q.data<float>();
  float* od = static_cast<float*>(out.raw_data());
  parallel_for(tq * hkv, threads, [&](int64_t item, int) {
    const int64_t i = item / hkv, hk = item % hkv;
    std::vector<float> krow(d), vrow(d), acc(group * d, 0.0f), m(group, -INFINITY), l(group, 0.0f);
    const float* qg = qd + (i * hq + hk * group) * d;  // the group's query rows
    for (const ops::KvPage& pg : kv.heads[hk]) {
      for (int32_t s = 0; s < pg.used; ++s) {
        if (pg.positions[s] > q_positions[i]) continue;
        load_row(*pg.k, s, d, krow.data());
        load_row(*pg.v, s, d, vrow.data());
        for (int64_t g = 0; g < group; ++g) {
          float dot = 0.0f;
          for (int64_t j = 0; j < d; ++j) dot += qg[g * d + j] * krow[j];
          dot *= scale;
          float* a = acc.data() + g * d;
          if (dot > m[g]) {  // rescale what was accumulated under the old maximum
            const float c = m[g] == -INFINITY ? 0.0f : std::exp(m[g] - dot);
            for (int64_t j = 0; j < d; ++j) a[j] *= c;
            l[g] *= c;
            m[g] = dot;
          }
          const float e = std::exp(dot - m[g]);
          l[g] += e;
          for (int64_t j = 0; j < d; ++j) a[j] += e * vrow[j];
        }
      }
    }
    for (int64_t g = 0; g < group; ++g) {
      float* orow = od + (i * hq + hk * group + g) * d;
      const float inv = l[g] > 0.0f ? 1.0f / l[g] : 0.0f;
      for (int64_t j = 0; j < d; ++j) orow[j] = acc[g * d + j] * inv;
    }
  });
}

}  // namespace tandem::cpu::fast
