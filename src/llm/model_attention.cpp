// SPDX-License-Identifier: Apache-2.0
// cache_attention: attention of a chunk of queries over the block lists of a KvCache (see model.h).
// Per (query token, query head): walk the KV head's blocks, score the visible slots (position <=
// query position), and fold each block into a running (max, sum, accumulator) triple, so the
// softmax is stable without materialising a row of scores. Work items are (token, KV head) pairs;
// the query heads of a GQA group share each K/V row read.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "cache_attention_widen.h"
#include "kv_quant/attention.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The inner loops, compiled for AVX-512, AVX2+FMA and baseline x86-64 (picked at load time), since
// the library itself is built for the baseline ISA. Not under sanitizers: the ifunc resolvers
// behind target_clones run before the ThreadSanitizer runtime is up and crash the process at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TANDEM_SANITIZED)
#define TANDEM_ATTN_CLONES \
  __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define TANDEM_ATTN_CLONES
#endif

// scores[g * stride + s] = scale * q_g . k_s for the visible slots (position <= qpos), -inf for
// the others; returns the number of visible slots.
TANDEM_ATTN_CLONES int score_block(const float* q0, int64_t group, int64_t d, const float* kb,
                                   const int32_t* positions, int used, int32_t qpos, float scale,
                                   float* scores, int64_t stride) {
  int visible = 0;
  for (int s = 0; s < used; ++s) {
    const bool sees = positions[s] <= qpos;
    visible += sees;
    const float* kr = kb + s * d;
    for (int64_t g = 0; g < group; ++g) {
      if (!sees) {
        scores[g * stride + s] = kNegInf;
        continue;
      }
      const float* qv = q0 + g * d;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < d; ++i) dot += qv[i] * kr[i];
      scores[g * stride + s] = dot * scale;
    }
  }
  return visible;
}

// acc += sum_s exp(sc[s] - m) * v_s over the visible slots; returns the sum of the weights.
TANDEM_ATTN_CLONES float accumulate_block(const float* sc, int used, float m, const float* vb,
                                          int64_t d, float* acc) {
  float sum = 0.0f;
  for (int s = 0; s < used; ++s) {
    if (sc[s] == kNegInf) continue;
    const float p = std::exp(sc[s] - m);
    sum += p;
    const float* vr = vb + s * d;
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) acc[i] += p * vr[i];
  }
  return sum;
}

}  // namespace

namespace {

bool all_blocks_f32(const KvCache& cache, int layer) {
  for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
    for (const KvBlock& b : cache.blocks(layer, h)) {
      if (b.dtype != DType::kF32) return false;
    }
  }
  return true;
}

// Caches on a GPU and blocks of other dtypes go through ops::paged_attention (the backend's
// kernel reads the blocks in place).
void paged_cache_attention(const Tensor& q, std::span<const int32_t> positions,
                           const KvCache& cache, int layer, Tensor& out, float scale) {
  ops::PagedKv kv;
  kv.heads.resize(static_cast<size_t>(cache.shape().n_kv_heads));
  for (int h = 0; h < cache.shape().n_kv_heads; ++h) {
    for (const KvBlock& b : cache.blocks(layer, h)) {
      kv.heads[h].push_back(ops::KvPage{&b.k, &b.v, b.positions.data(), b.used});
    }
  }
  ops::paged_attention(q, positions, kv, out, scale);
}

thread_local AttentionTap current_tap;  // kv_quant.h: ScopedAttentionTap

}  // namespace

ScopedAttentionTap::ScopedAttentionTap(AttentionTap tap)
    : previous_(std::exchange(current_tap, std::move(tap))) {}

ScopedAttentionTap::~ScopedAttentionTap() { current_tap = std::move(previous_); }

void cache_attention(const Tensor& q, std::span<const int32_t> positions, const KvCache& cache,
                     int layer, Tensor& out, float scale) {
  const KvCacheShape& cs = cache.shape();
  check_cache_attention_args(q, positions, cache, out);  // kv_quant/attention.cpp
  const int64_t t_count = q.size(0), hq = q.size(1), d = cs.head_dim;
  const int64_t group = hq / cs.n_kv_heads;
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(d));
  if (current_tap && cs.device.is_cpu()) current_tap(cache, layer, q, positions);
  if (!cs.device.is_cpu() && !cache.has_quantized(layer)) {  // the GPU kernel reads blocks in place
    paged_cache_attention(q, positions, cache, layer, out, scale);
    return;
  }
  if (cache.has_quantized(layer)) {  // packed codes: kv_quant/attention.cpp
    cache_attention_quantized(q, positions, cache, layer, out, scale);
    return;
  }
  if (cs.dtype != DType::kF32) {  // f16 blocks: cache_attention_widen.cpp
    cache_attention_widened(q, positions, cache, layer, out, scale);
    return;
  }
  if (!all_blocks_f32(cache, layer)) {
    paged_cache_attention(q, positions, cache, layer, out, scale);
    return;
  }
  const float* qd = q.data<float>();
  float* od = out.data<float>();
  const int64_t hkv = cs.n_kv_heads;
  // A work item is one (token, KV head): the `group` query heads that share the KV head are
  // scored together, so each K/V row is read once per group.
  const int64_t items = t_count * hkv;
  // Validates the layer (the parallel region below must not throw). Cost estimate: every query
  // head reads the whole KV head once (2*d multiply-adds per slot).
  const int64_t work = t_count * hq * cache.tokens(layer, 0) * d * 2;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      work / (int64_t{64} << 10), 1, std::min<int64_t>(items, cpu_num_threads())));
  const int bt = cs.block_tokens;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> scores(group * bt);
    std::vector<float> acc(group * d), m(group), sum(group);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t = item / hkv, kvh = item % hkv;
      const int32_t qpos = positions[t];
      const float* q0 = qd + (t * hq + kvh * group) * d;  // the group's query rows, contiguous
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (const KvBlock& b : cache.blocks(layer, static_cast<int>(kvh))) {
        const float* kb = b.k.data<float>();
        const float* vb = b.v.data<float>();
        const int visible = score_block(q0, group, d, kb, b.positions.data(), b.used, qpos, scale,
                                        scores.data(), bt);
        if (visible == 0) continue;
        for (int64_t g = 0; g < group; ++g) {
          float* sc = scores.data() + g * bt;
          float* ac = acc.data() + g * d;
          const float bmax = *std::max_element(sc, sc + b.used);
          if (bmax > m[g]) {
            const float r = std::exp(m[g] - bmax);  // 0 on the first visible block
            sum[g] *= r;
            for (int64_t i = 0; i < d; ++i) ac[i] *= r;
            m[g] = bmax;
          }
          sum[g] += accumulate_block(sc, b.used, m[g], vb, d, ac);
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
