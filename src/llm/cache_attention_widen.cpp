// SPDX-License-Identifier: Apache-2.0
// cache_attention for f16 (or mixed) KV blocks; see cache_attention_widen.h. Work items are
// (token, KV head) pairs as in the f32 kernel: the query heads of a GQA group share each widened
// block. Softmax is online per block (running max, rescaled sum and accumulator).
#include "cache_attention_widen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// rows [0, used) of a block tensor as f32: the block's own data for f32, `scratch` otherwise.
const float* widen(const Tensor& t, DType dtype, int used, int64_t d, std::vector<float>& scratch) {
  if (dtype == DType::kF32) return t.data<float>();
  const auto* h = static_cast<const uint16_t*>(t.raw_data());
  const int64_t n = used * d;
  if (dtype == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) scratch[i] = f16_to_f32(h[i]);
  } else if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) scratch[i] = bf16_to_f32(h[i]);
  }
  return scratch.data();
}

}  // namespace

void cache_attention_widened(const Tensor& q, std::span<const int32_t> positions,
                             const KvCache& cache, int layer, Tensor& out, float scale) {
  // q and out were validated and scale resolved by cache_attention (model_attention.cpp).
  const KvCacheShape& cs = cache.shape();
  const int64_t t_count = q.size(0), hq = q.size(1), d = cs.head_dim, hkv = cs.n_kv_heads;
  const int64_t group = hq / hkv;
  for (int h = 0; h < hkv; ++h) {
    for (const KvBlock& b : cache.blocks(layer, h)) {  // also validates the layer
      if (b.dtype != DType::kF32 && b.dtype != DType::kF16 && b.dtype != DType::kBF16) {
        throw Unsupported(cat("cache_attention: KV blocks of dtype ", dtype_name(b.dtype),
                              " (layer ", layer, ", head ", h, ")"));
      }
    }
  }
  const float* qd = q.data<float>();
  float* od = out.data<float>();
  const int64_t items = t_count * hkv;
  const int64_t work = t_count * hq * cache.tokens(layer, 0) * d * 2;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      work / (int64_t{64} << 10), 1, std::min<int64_t>(items, cpu_num_threads())));
  const int bt = cs.block_tokens;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> kw(static_cast<size_t>(bt * d)), vw(static_cast<size_t>(bt * d));
    std::vector<float> scores(static_cast<size_t>(group * bt));
    std::vector<float> acc(static_cast<size_t>(group * d)), m(group), sum(group);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t = item / hkv, kvh = item % hkv;
      const int32_t qpos = positions[t];
      const float* q0 = qd + (t * hq + kvh * group) * d;
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (const KvBlock& b : cache.blocks(layer, static_cast<int>(kvh))) {
        int visible = 0;
        for (int s = 0; s < b.used; ++s) visible += b.positions[s] <= qpos;
        if (visible == 0) continue;
        const float* kb = widen(b.k, b.dtype, b.used, d, kw);
        const float* vb = widen(b.v, b.dtype, b.used, d, vw);
        for (int64_t g = 0; g < group; ++g) {
          const float* qv = q0 + g * d;
          float* sc = scores.data() + g * bt;
          float bmax = kNegInf;
          for (int s = 0; s < b.used; ++s) {
            if (b.positions[s] > qpos) {
              sc[s] = kNegInf;
              continue;
            }
            const float* kr = kb + s * d;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int64_t i = 0; i < d; ++i) dot += qv[i] * kr[i];
            sc[s] = dot * scale;
            bmax = std::max(bmax, sc[s]);
          }
          float* ac = acc.data() + g * d;
          if (bmax > m[g]) {
            const float r = std::exp(m[g] - bmax);  // 0 on the first visible block
            sum[g] *= r;
            for (int64_t i = 0; i < d; ++i) ac[i] *= r;
            m[g] = bmax;
          }
          for (int s = 0; s < b.used; ++s) {
            if (sc[s] == kNegInf) continue;
            const float p = std::exp(sc[s] - m[g]);
            sum[g] += p;
            const float* vr = vb + s * d;
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) ac[i] += p * vr[i];
          }
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* o = od + (t * hq + kvh * group + g) * d;
        const float inv = sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f;
        for (int64_t i = 0; i < d; ++i) o[i] = acc[g * d + i] * inv;
      }
    }
  }
}

}  // namespace tandem::llm
