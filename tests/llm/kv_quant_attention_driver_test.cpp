// SPDX-License-Identifier: Apache-2.0
// The ragged KV attention driver (src/llm/kv_quant/attention.h) against a plain reference: for
// every storage format (f32, f16, bf16, kAffine 8/4/2 bits with whole-row, 32-channel and odd
// groups, q8_0, q4_0, symmetric 8/4 and mixed 8/4-bit rows, per-channel 8/4/2 bits) and every
// kernel variant the host runs (AVX-512, AVX2, scalar), odd head dims (40, 72) and 64, GQA groups
// of 1 and 3, blocks of partial length, shuffled positions and causal masking. The reference is
// softmax attention in double over the rows kv_decode() (the codec's definition) gives back, so
// the driver must be exact with respect to the codes: relative L2 error below 5e-6 (measured at
// most 1.2e-6: f32 rounding of scores up to ~10 and the vector exp, ~1e-7 relative, amplified by
// the softmax). Against the original f32 rows the error is the
// quantization's, bounded per format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "../../src/llm/kv_quant/attention.h"
#include "../../src/llm/kv_quant/attention_kernels.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"

namespace tandem::llm {
namespace {

struct Format {
  const char* name;
  KvQuantFormat k, v;  // k.codec == kPlain: plain rows of `plain` dtype
  DType plain = DType::kF32;
  double max_quant_error;  // attention output vs the original f32 rows, relative L2
};

KvQuantFormat fmt(KvCodec c, int bits, int group = 0, bool mixed = false) {
  KvQuantFormat f;
  f.codec = c;
  f.bits = static_cast<uint8_t>(bits);
  f.group = static_cast<uint16_t>(group);
  f.mixed = mixed;
  return f;
}

// Bounds about 1.5x the errors measured on these random rows (4-bit and below are coarse).
std::vector<Format> formats() {
  return {
      {"f32", {}, {}, DType::kF32, 1e-6},
      {"f16", {}, {}, DType::kF16, 1e-3},
      {"bf16", {}, {}, DType::kBF16, 1e-2},
      {"int8", fmt(KvCodec::kAffine, 8), fmt(KvCodec::kAffine, 8), DType::kF32, 0.02},
      {"int4", fmt(KvCodec::kAffine, 4), fmt(KvCodec::kAffine, 4), DType::kF32, 0.3},
      {"affine2/g32", fmt(KvCodec::kAffine, 2, 32), fmt(KvCodec::kAffine, 2, 32), DType::kF32, 1.3},
      {"affine4/g12", fmt(KvCodec::kAffine, 4, 12), fmt(KvCodec::kAffine, 4, 12), DType::kF32,
       0.15},
      {"affine2/g7", fmt(KvCodec::kAffine, 2, 7), fmt(KvCodec::kAffine, 8, 7), DType::kF32, 0.5},
      {"q8_0", fmt(KvCodec::kBlock32, 8), fmt(KvCodec::kBlock32, 8), DType::kF32, 0.02},
      {"q4_0", fmt(KvCodec::kBlock32, 4), fmt(KvCodec::kBlock32, 4), DType::kF32, 0.3},
      {"sym8", fmt(KvCodec::kSymmetric, 8), fmt(KvCodec::kSymmetric, 8), DType::kF32, 0.03},
      {"sym4", fmt(KvCodec::kSymmetric, 4), fmt(KvCodec::kSymmetric, 4), DType::kF32, 0.5},
      {"sym8/4 + sym4", fmt(KvCodec::kSymmetric, 8, 0, true), fmt(KvCodec::kSymmetric, 4),
       DType::kF32, 0.5},
      {"chan8 + affine8", fmt(KvCodec::kChannel, 8), fmt(KvCodec::kAffine, 8), DType::kF32, 0.015},
      {"chan4 + affine4/g32", fmt(KvCodec::kChannel, 4), fmt(KvCodec::kAffine, 4, 32), DType::kF32,
       0.16},
      {"chan2 + affine2/g32", fmt(KvCodec::kChannel, 2), fmt(KvCodec::kAffine, 2, 32), DType::kF32,
       0.9},
  };
}

struct Problem {
  int head_dim, n_kv_heads, group;
};

std::vector<float> normal(size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// One head's blocks of the given lengths: random rows (keys with an outlier channel), positions
// a shuffled permutation of [0, total) so that causal masking cuts through every block.
struct HeadRows {
  std::vector<std::vector<float>> k, v;  // per block [used, d], original rows
  std::vector<std::vector<int32_t>> pos;
};

HeadRows make_rows(const std::vector<int>& lengths, int d, std::mt19937_64& rng) {
  const int total = std::accumulate(lengths.begin(), lengths.end(), 0);
  std::vector<int32_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  HeadRows h;
  int at = 0;
  for (int n : lengths) {
    std::vector<float> k = normal(static_cast<size_t>(n) * d, rng);
    for (int s = 0; s < n; ++s) k[static_cast<size_t>(s) * d + 3] *= 6.0f;
    h.k.push_back(std::move(k));
    h.v.push_back(normal(static_cast<size_t>(n) * d, rng));
    h.pos.emplace_back(perm.begin() + at, perm.begin() + at + n);
    at += n;
  }
  return h;
}

KvBlock plain_block(const std::vector<float>& k, const std::vector<float>& v,
                    const std::vector<int32_t>& pos, int d, DType dt) {
  KvBlock b;
  b.dtype = dt;
  b.used = static_cast<int32_t>(pos.size());
  b.positions = pos;
  const int64_t n = static_cast<int64_t>(pos.size());
  if (dt == DType::kF32) {
    b.k = Tensor::from_vector(k, {n, d}, DType::kF32);
    b.v = Tensor::from_vector(v, {n, d}, DType::kF32);
    return b;
  }
  std::vector<uint16_t> hk(k.size()), hv(v.size());
  for (size_t i = 0; i < k.size(); ++i) {
    hk[i] = dt == DType::kF16 ? f32_to_f16(k[i]) : f32_to_bf16(k[i]);
    hv[i] = dt == DType::kF16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
  }
  b.k = Tensor::empty({n, d}, dt);
  b.v = Tensor::empty({n, d}, dt);
  std::copy(hk.begin(), hk.end(), static_cast<uint16_t*>(b.k.raw_data()));
  std::copy(hv.begin(), hv.end(), static_cast<uint16_t*>(b.v.raw_data()));
  return b;
}

// The rows a block holds, as the codec defines them (kv_decode; plain rows converted).
void block_rows(const KvBlock& b, int d, std::vector<float>& k, std::vector<float>& v) {
  const size_t n = static_cast<size_t>(b.used) * d;
  k.assign(n, 0.0f);
  v.assign(n, 0.0f);
  if (!b.quantized()) {
    for (size_t i = 0; i < n; ++i) {
      if (b.dtype == DType::kF32) {
        k[i] = b.k.data<float>()[i], v[i] = b.v.data<float>()[i];
      } else {
        const auto* hk = static_cast<const uint16_t*>(b.k.raw_data());
        const auto* hv = static_cast<const uint16_t*>(b.v.raw_data());
        k[i] = b.dtype == DType::kF16 ? f16_to_f32(hk[i]) : bf16_to_f32(hk[i]);
        v[i] = b.dtype == DType::kF16 ? f16_to_f32(hv[i]) : bf16_to_f32(hv[i]);
      }
    }
    return;
  }
  kv_decode(b.kq, static_cast<const uint8_t*>(b.k.raw_data()), b.used, d, k.data());
  kv_decode(b.vq, static_cast<const uint8_t*>(b.v.raw_data()), b.used, d, v.data());
}

// Softmax attention in double over the given rows of every head (per query token t, query head
// qh reads KV head qh / group; keys with position > positions[t] are masked).
std::vector<float> reference(const std::vector<float>& q, const std::vector<int32_t>& qpos,
                             const Problem& p, const std::vector<std::vector<float>>& k,
                             const std::vector<std::vector<float>>& v,
                             const std::vector<std::vector<int32_t>>& kpos, float scale) {
  const int d = p.head_dim, hq = p.n_kv_heads * p.group;
  std::vector<float> out(q.size(), 0.0f);
  for (size_t t = 0; t < qpos.size(); ++t) {
    for (int qh = 0; qh < hq; ++qh) {
      const int h = qh / p.group;
      const float* qr = q.data() + (t * hq + qh) * d;
      std::vector<double> sc;
      std::vector<const float*> vr;
      for (size_t s = 0; s < kpos[h].size(); ++s) {
        if (kpos[h][s] > qpos[t]) continue;
        double dot = 0;
        for (int i = 0; i < d; ++i) dot += static_cast<double>(qr[i]) * k[h][s * d + i];
        sc.push_back(dot * scale);
        vr.push_back(v[h].data() + s * d);
      }
      if (sc.empty()) continue;
      const double m = *std::max_element(sc.begin(), sc.end());
      double sum = 0;
      std::vector<double> o(static_cast<size_t>(d), 0.0);
      for (size_t s = 0; s < sc.size(); ++s) {
        const double w = std::exp(sc[s] - m);
        sum += w;
        for (int i = 0; i < d; ++i) o[i] += w * vr[s][i];
      }
      for (int i = 0; i < d; ++i) out[(t * hq + qh) * d + i] = static_cast<float>(o[i] / sum);
    }
  }
  return out;
}

double rel_l2(const std::vector<float>& ref, const float* got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (ref[i] - got[i]) * static_cast<double>(ref[i] - got[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Per head: the decoded rows (concatenated over blocks) and the original ones.
struct Built {
  std::vector<std::vector<float>> dk, dv, ok, ov;
  std::vector<std::vector<int32_t>> pos;
};

// Fills layer 0 of `cache` with blocks of `lengths` in format f (plus, when `residual`, a final
// partial f32 block as a quantized policy leaves it).
Built build(KvCache& cache, const Problem& p, const Format& f, const std::vector<int>& lengths,
            bool residual, std::mt19937_64& rng) {
  Built out;
  const int d = p.head_dim;
  for (int h = 0; h < p.n_kv_heads; ++h) {
    HeadRows rows = make_rows(lengths, d, rng);
    std::vector<KvBlock> blocks;
    std::vector<float> dk, dv, ok, ov;
    std::vector<int32_t> pos;
    for (size_t bi = 0; bi < lengths.size(); ++bi) {
      const bool plain = f.k.codec == KvCodec::kPlain || (residual && bi + 1 == lengths.size());
      KvBlock b;
      if (plain) {
        b = plain_block(rows.k[bi], rows.v[bi], rows.pos[bi], d,
                        f.k.codec == KvCodec::kPlain ? f.plain : DType::kF32);
      } else {
        std::vector<uint8_t> wide(static_cast<size_t>(lengths[bi]));
        for (size_t s = 0; s < wide.size(); ++s) wide[s] = s % 3 == 0;  // a third 8-bit
        b = kv_make_block(cache, f.k, f.v, rows.k[bi].data(), rows.v[bi].data(), rows.pos[bi],
                          f.k.mixed ? std::span<const uint8_t>(wide) : std::span<const uint8_t>());
      }
      std::vector<float> bk, bv;
      block_rows(b, d, bk, bv);
      dk.insert(dk.end(), bk.begin(), bk.end());
      dv.insert(dv.end(), bv.begin(), bv.end());
      ok.insert(ok.end(), rows.k[bi].begin(), rows.k[bi].end());
      ov.insert(ov.end(), rows.v[bi].begin(), rows.v[bi].end());
      pos.insert(pos.end(), rows.pos[bi].begin(), rows.pos[bi].end());
      blocks.push_back(std::move(b));
    }
    cache.replace_blocks(0, h, std::move(blocks));
    out.dk.push_back(std::move(dk));
    out.dv.push_back(std::move(dv));
    out.ok.push_back(std::move(ok));
    out.ov.push_back(std::move(ov));
    out.pos.push_back(std::move(pos));
  }
  return out;
}

KvCacheShape cache_shape(const Problem& p) {
  KvCacheShape s;
  s.n_layers = 1;
  s.n_kv_heads = p.n_kv_heads;
  s.head_dim = p.head_dim;
  s.block_tokens = 32;
  return s;
}

TEST(KvAttentionDriver, EveryFormatEveryKernelMatchesThePlainReference) {
  const std::vector<Problem> problems = {{40, 2, 1}, {64, 1, 3}, {72, 2, 3}};
  const std::vector<int> lengths = {32, 7, 32, 19, 1, 32, 25};  // 148 tokens, partial blocks
  const auto variants = kvattn::attention_kernel_variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_STREQ(variants.back()->name, "scalar");
  uint64_t seed = 1;
  for (const Problem& p : problems) {
    for (const Format& f : formats()) {
      for (const bool residual : {false, true}) {
        if (residual && f.k.codec == KvCodec::kPlain) continue;
        SCOPED_TRACE(cat(f.name, " d=", p.head_dim, " kv=", p.n_kv_heads, " group=", p.group,
                         residual ? " +f32 residual" : ""));
        std::mt19937_64 rng(seed++);
        KvCacheShape cs = cache_shape(p);
        if (f.k.codec == KvCodec::kPlain && f.plain == DType::kF16) cs.dtype = DType::kF16;
        KvCache cache(cs);
        const Built rows = build(cache, p, f, lengths, residual, rng);
        // Query tokens at positions that see nothing, some, most and all of the keys.
        const std::vector<int32_t> qpos = {-1, 5, 40, 100, 147, 300};
        const int hq = p.n_kv_heads * p.group;
        const std::vector<float> qv = normal(qpos.size() * hq * p.head_dim, rng);
        const Tensor q = Tensor::from_vector(
            qv, {static_cast<int64_t>(qpos.size()), hq, p.head_dim}, DType::kF32);
        const float scale = 1.0f / std::sqrt(static_cast<float>(p.head_dim));
        const std::vector<float> ref = reference(qv, qpos, p, rows.dk, rows.dv, rows.pos, scale);
        const std::vector<float> orig = reference(qv, qpos, p, rows.ok, rows.ov, rows.pos, scale);
        for (const kvattn::AttentionKernels* kn : variants) {
          SCOPED_TRACE(kn->name);
          Tensor out = Tensor::empty(q.shape(), DType::kF32);
          ragged_cache_attention(q, qpos, cache, 0, out, scale, kn);
          const float* o = out.data<float>();
          EXPECT_LT(rel_l2(ref, o), 5e-6);
          for (int i = 0; i < hq * p.head_dim; ++i) ASSERT_EQ(o[i], 0.0f);  // qpos -1: no keys
          EXPECT_LT(rel_l2(orig, o), f.max_quant_error);
        }
        // The public entry point takes the same path (f16 caches, quantized blocks; an f32
        // cache with bf16 blocks goes to ops::paged_attention instead).
        if (f.plain == DType::kBF16) continue;
        Tensor out = Tensor::empty(q.shape(), DType::kF32);
        cache_attention(q, qpos, cache, 0, out, scale);
        EXPECT_LT(rel_l2(ref, out.data<float>()), 5e-6);
      }
    }
  }
}

TEST(KvAttentionDriver, ChannelScaledBlocksScoreWithScaledQueriesAndRescaleValues) {
  const Problem p{40, 2, 3};
  KvCache cache(cache_shape(p));
  std::mt19937_64 rng(5);
  const int d = p.head_dim;
  std::vector<std::vector<float>> dk, dv;
  std::vector<std::vector<int32_t>> kpos;
  for (int h = 0; h < p.n_kv_heads; ++h) {
    std::vector<float> sk(static_cast<size_t>(d)), sv(sk.size());
    for (int i = 0; i < d; ++i) sk[i] = 1.0f + 0.25f * (i % 5), sv[i] = 1.0f + 0.5f * (i % 3);
    cache.set_channel_scales(0, h, sk, sv);
    HeadRows rows = make_rows({32, 32, 9}, d, rng);
    std::vector<KvBlock> blocks;
    std::vector<float> hk, hv;
    std::vector<int32_t> pos;
    for (size_t bi = 0; bi < 3; ++bi) {
      std::vector<float> ks = rows.k[bi], vs = rows.v[bi];  // stored as K / s_k, V / s_v
      for (size_t i = 0; i < ks.size(); ++i) ks[i] /= sk[i % d], vs[i] /= sv[i % d];
      std::vector<uint8_t> wide(rows.pos[bi].size(), 0);
      wide[0] = 1;
      KvBlock b = bi < 2 ? kv_make_block(cache, fmt(KvCodec::kSymmetric, 8, 0, true),
                                         fmt(KvCodec::kSymmetric, 4), ks.data(), vs.data(),
                                         rows.pos[bi], wide, true)
                         : plain_block(rows.k[bi], rows.v[bi], rows.pos[bi], d, DType::kF32);
      std::vector<float> bk, bv;
      kv_block_rows(cache, 0, h, b, bk, bv);  // channel scales applied
      hk.insert(hk.end(), bk.begin(), bk.end());
      hv.insert(hv.end(), bv.begin(), bv.end());
      pos.insert(pos.end(), rows.pos[bi].begin(), rows.pos[bi].end());
      blocks.push_back(std::move(b));
    }
    cache.replace_blocks(0, h, std::move(blocks));
    dk.push_back(hk), dv.push_back(hv), kpos.push_back(pos);
  }
  const std::vector<int32_t> qpos = {30, 72};
  const std::vector<float> qv = normal(qpos.size() * 6 * d, rng);
  const Tensor q = Tensor::from_vector(qv, {2, 6, d}, DType::kF32);
  const float scale = 0.2f;
  const std::vector<float> ref = reference(qv, qpos, p, dk, dv, kpos, scale);
  for (const kvattn::AttentionKernels* kn : kvattn::attention_kernel_variants()) {
    SCOPED_TRACE(kn->name);
    Tensor out = Tensor::empty(q.shape(), DType::kF32);
    ragged_cache_attention(q, qpos, cache, 0, out, scale, kn);
    EXPECT_LT(rel_l2(ref, out.data<float>()), 5e-6);
  }
}

TEST(KvAttentionDriver, LargeScoresStayFiniteAndPickTheMatchingKey) {
  // Scores of several hundred: the online softmax must rescale instead of overflowing, and the
  // block holding the one key aligned with the query must win.
  const Problem p{64, 1, 1};
  KvCache cache(cache_shape(p));
  std::mt19937_64 rng(9);
  HeadRows rows = make_rows({32, 32, 32}, p.head_dim, rng);
  std::vector<float> q(static_cast<size_t>(p.head_dim), 0.0f);
  for (int i = 0; i < p.head_dim; ++i) q[i] = 40.0f * rows.k[2][5 * p.head_dim + i];
  std::vector<KvBlock> blocks;
  for (int bi = 0; bi < 3; ++bi) {
    blocks.push_back(kv_make_block(cache, fmt(KvCodec::kAffine, 8), fmt(KvCodec::kAffine, 8),
                                   rows.k[bi].data(), rows.v[bi].data(), rows.pos[bi]));
  }
  cache.replace_blocks(0, 0, std::move(blocks));
  const Tensor qt = Tensor::from_vector(q, {1, 1, p.head_dim}, DType::kF32);
  const std::vector<int32_t> qpos = {1000};
  for (const kvattn::AttentionKernels* kn : kvattn::attention_kernel_variants()) {
    SCOPED_TRACE(kn->name);
    Tensor out = Tensor::empty(qt.shape(), DType::kF32);
    ragged_cache_attention(qt, qpos, cache, 0, out, 1.0f, kn);
    for (int i = 0; i < p.head_dim; ++i) {
      ASSERT_TRUE(std::isfinite(out.data<float>()[i]));
      EXPECT_NEAR(out.data<float>()[i], rows.v[2][5 * p.head_dim + i], 0.02);
    }
  }
}

TEST(KvAttentionDriver, MalformedBlocksGiveClearErrors) {
  const Problem p{64, 1, 1};
  KvCache cache(cache_shape(p));
  std::mt19937_64 rng(3);
  HeadRows rows = make_rows({32}, p.head_dim, rng);
  KvBlock b = kv_make_block(cache, fmt(KvCodec::kAffine, 4), fmt(KvCodec::kAffine, 4),
                            rows.k[0].data(), rows.v[0].data(), rows.pos[0]);
  b.k = Tensor::empty({100}, DType::kU8);  // too few bytes for 32 rows
  std::vector<KvBlock> blocks;
  blocks.push_back(std::move(b));
  cache.replace_blocks(0, 0, std::move(blocks));
  const Tensor q = Tensor::from_vector(normal(64, rng), {1, 1, 64}, DType::kF32);
  Tensor out = Tensor::empty(q.shape(), DType::kF32);
  const std::vector<int32_t> qpos = {40};
  try {
    cache_attention(q, qpos, cache, 0, out);
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("K of a 32-slot affine4"), std::string::npos) << what;
    EXPECT_NE(what.find("layer 0, head 0"), std::string::npos) << what;
  }
  // The driver checks q and out as cache_attention does.
  const Tensor q_bad = Tensor::from_vector(normal(2 * 64, rng), {2, 1, 64}, DType::kF32);
  EXPECT_THROW(ragged_cache_attention(q_bad, qpos, cache, 0, out, 0.125f), InvalidArgument);
  Tensor out_bad = Tensor::empty({1, 1, 32}, DType::kF32);
  EXPECT_THROW(ragged_cache_attention(q, qpos, cache, 0, out_bad, 0.125f), InvalidArgument);
  // A format that does not exist.
  KvBlock bad = kv_make_block(cache, fmt(KvCodec::kAffine, 4), fmt(KvCodec::kAffine, 4),
                              rows.k[0].data(), rows.v[0].data(), rows.pos[0]);
  bad.kq.bits = 3;
  blocks.clear();
  blocks.push_back(std::move(bad));
  cache.replace_blocks(0, 0, std::move(blocks));
  EXPECT_THROW(cache_attention(q, qpos, cache, 0, out), InvalidArgument);
}

}  // namespace
}  // namespace tandem::llm
