// SPDX-License-Identifier: Apache-2.0
// The ragged-attention driver over f16 / quantized / mixed KV blocks; see attention.h.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_cuda.h"
#include "attention_kernels.h"
#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

using kvattn::RowBlock;
using kvattn::RowCodec;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// One side (K or V) of a block as the driver reads it: bytes and their format.
struct Side {
  const uint8_t* data = nullptr;
  int64_t bytes = 0;  // what the rows occupy (scales included)
  KvQuantFormat f;
};
// A validated block: its two sides, resolved once per call (not per work item).
struct BlockView {
  const KvBlock* b = nullptr;
  Side k, v;
};

// The row reader of one side: how its bytes decode (not used for f32 rows, which are read in
// place, nor for bf16 rows, widened by rows_f32).
RowBlock row_block(const KvBlock& b, const Side& side, int64_t d, bool channel_codes, float* aux) {
  const KvQuantFormat& f = side.f;
  RowBlock r;
  r.data = side.data;
  r.n = b.used;
  r.d = d;
  r.bits = f.bits;
  r.aux = aux;
  switch (f.codec) {
    case KvCodec::kPlain:
      r.codec = RowCodec::kF16;
      break;
    case KvCodec::kAffine:
      r.codec = RowCodec::kAffine;
      r.group = f.group == 0 ? d : std::min<int64_t>(f.group, d);
      break;
    case KvCodec::kBlock32:
      r.codec = RowCodec::kBlock32;
      break;
    case KvCodec::kSymmetric:
      r.codec = f.mixed ? RowCodec::kSymmetricMixed : RowCodec::kSymmetric;
      break;
    case KvCodec::kChannel:
      r.codec = channel_codes ? RowCodec::kChannelCodes : RowCodec::kChannel;
      break;
  }
  return r;
}

// Validates the blocks of a layer and resolves their sides. Checking a format and computing the
// bytes its rows need (kv_encoded_bytes, the codec's definition) is done once per distinct
// (format, slot count), not once per block: a step at long context visits thousands of blocks.
class BlockChecker {
 public:
  BlockChecker(const KvCache& cache, int layer) : cache_(cache), layer_(layer) {}

  // The views of head h's blocks; throws InvalidArgument / Unsupported naming layer and head.
  void check_head(int h, std::vector<BlockView>& out) {
    out.clear();
    for (const KvBlock& b : cache_.blocks(layer_, h)) {  // also validates the layer
      const auto where = [&] { return cat(" (layer ", layer_, ", head ", h, ")"); };
      if (b.channel_scaled && cache_.channel_scales(layer_, h) == nullptr) {
        throw InvalidArgument(cat("cache_attention: channel-scaled block without scales", where()));
      }
      if (b.used < 0 || static_cast<int64_t>(b.positions.size()) < b.used) {
        throw InvalidArgument(cat("cache_attention: block of ", b.used, " slots with ",
                                  b.positions.size(), " positions", where()));
      }
      if (b.quantized()) {
        if (b.kq.codec == KvCodec::kPlain || b.vq.codec == KvCodec::kPlain) {
          throw Unsupported(
              cat("cache_attention: a block with one plain and one quantized side", where()));
        }
      } else if (b.dtype != DType::kF32 && b.dtype != DType::kF16 && b.dtype != DType::kBF16) {
        throw Unsupported(
            cat("cache_attention: KV blocks of dtype ", dtype_name(b.dtype), where()));
      }
      BlockView view;
      view.b = &b;
      for (const bool is_k : {true, false}) {
        const Tensor& t = is_k ? b.k : b.v;
        Side& side = is_k ? view.k : view.v;
        side.f = is_k ? b.kq : b.vq;
        side.data = static_cast<const uint8_t*>(t.raw_data());
        const int64_t have = t.nbytes();
        const int64_t need = needed_bytes(b, side, have);
        side.bytes = need;
        if (have < need) {
          throw InvalidArgument(cat("cache_attention: ", is_k ? "K" : "V", " of a ", b.used,
                                    "-slot ", kv_format_name(side.f), " block holds ", have,
                                    " bytes, needs ", need, where()));
        }
      }
      longest_ = std::max(longest_, b.used);
      out.push_back(view);
    }
  }
  int longest() const { return longest_; }

 private:
  // Bytes of `n` rows of format f (the format is validated on first use).
  int64_t rows_bytes(const KvQuantFormat& f, int64_t n) {
    for (const Known& k : known_) {
      if (k.f == f && k.n == n) return k.bytes;
    }
    const int64_t bytes = kv_encoded_bytes(f, n, cache_.shape().head_dim);
    known_.push_back({f, n, bytes});
    return bytes;
  }
  int64_t needed_bytes(const KvBlock& b, const Side& side, int64_t have) {
    const int64_t d = cache_.shape().head_dim;
    const KvQuantFormat& f = side.f;
    if (f.codec == KvCodec::kPlain) return dtype_row_bytes(b.dtype, b.used * d);
    if (f.codec != KvCodec::kSymmetric || !f.mixed) return rows_bytes(f, b.used);
    // Mixed rows: the bitmap, then 4-bit rows plus the extra bytes of each 8-bit one.
    const int64_t map = (b.used + 7) / 8;
    if (have < map) return map;
    int64_t wide = 0;
    for (int s = 0; s < b.used; ++s) wide += (side.data[s / 8] >> (s % 8)) & 1;
    KvQuantFormat f4 = f, f8 = f;
    f4.mixed = f8.mixed = false;
    f4.bits = 4;
    f8.bits = 8;
    return map + rows_bytes(f4, b.used) + wide * (rows_bytes(f8, 1) - rows_bytes(f4, 1));
  }

  struct Known {
    KvQuantFormat f;
    int64_t n, bytes;
  };
  const KvCache& cache_;
  int layer_;
  int longest_ = 0;
  std::vector<Known> known_;
};

// Blocks are separate allocations of a few KiB, too short for the hardware prefetcher to ramp up
// on: the next block's K and V bytes are requested while this one is decoded and scored.
void prefetch_side(const Side& side) {
  for (int64_t i = 0; i < side.bytes; i += 64) __builtin_prefetch(side.data + i, 0, 3);
}

// Per-thread scratch of the driver.
struct Scratch {
  std::vector<float> kt, vt, aux, scores, p, acc, acc_s, qs, qf, bias, bmax, m, sum;
  Scratch(int64_t group, int64_t d, int rows)
      : kt(static_cast<size_t>(rows * d)),
        vt(kt.size()),
        aux(static_cast<size_t>(2 * d)),
        scores(static_cast<size_t>(group * rows)),
        p(scores.size()),
        acc(static_cast<size_t>(group * d)),
        acc_s(acc.size()),
        qs(acc.size()),
        qf(acc.size()),
        bias(static_cast<size_t>(group)),
        bmax(bias.size()),
        m(bias.size()),
        sum(bias.size()) {}
};

// Rows [0, used) of one side of a block as f32: in place for f32 rows, else decoded into `buf`.
const float* rows_f32(const kvattn::AttentionKernels& kn, const KvBlock& b, const Side& side,
                      int64_t d, bool channel_codes, float* aux, float* buf) {
  if (side.f.codec == KvCodec::kPlain) {
    if (b.dtype == DType::kF32) return reinterpret_cast<const float*>(side.data);
    if (b.dtype == DType::kBF16) {
      const auto* h = reinterpret_cast<const uint16_t*>(side.data);
      for (int64_t i = 0; i < b.used * d; ++i) buf[i] = bf16_to_f32(h[i]);
      return buf;
    }
  }
  kn.decode(row_block(b, side, d, channel_codes, aux), buf);
  return buf;
}

}  // namespace

void check_cache_attention_args(const Tensor& q, std::span<const int32_t> positions,
                                const KvCache& cache, const Tensor& out) {
  const KvCacheShape& cs = cache.shape();
  if (q.rank() != 3 || q.dtype() != DType::kF32 || !q.is_contiguous() ||
      q.size(0) != static_cast<int64_t>(positions.size()) || q.size(2) != cs.head_dim ||
      q.size(1) < cs.n_kv_heads || q.size(1) % cs.n_kv_heads != 0) {
    throw InvalidArgument(cat("cache_attention: q ", q.to_string(), " must be contiguous f32 [",
                              positions.size(), ", k*", cs.n_kv_heads, ", ", cs.head_dim, "]"));
  }
  if (out.shape() != q.shape() || out.dtype() != DType::kF32 || !out.is_contiguous()) {
    throw InvalidArgument(
        cat("cache_attention: out ", out.to_string(), " must be f32 ", q.shape().to_string()));
  }
}

void ragged_cache_attention(const Tensor& q, std::span<const int32_t> positions,
                            const KvCache& cache, int layer, Tensor& out, float scale,
                            const kvattn::AttentionKernels* kernels) {
  check_cache_attention_args(q, positions, cache, out);
  const KvCacheShape& cs = cache.shape();
  const int64_t t_count = q.size(0), hq = q.size(1), d = cs.head_dim, hkv = cs.n_kv_heads;
  const int64_t group = hq / hkv;
  std::vector<std::vector<BlockView>> views(static_cast<size_t>(hkv));
  BlockChecker checker(cache, layer);
  for (int h = 0; h < hkv; ++h) checker.check_head(h, views[h]);
  const int rows = std::max(checker.longest(), 1);
  const kvattn::AttentionKernels& kn = kernels ? *kernels : kvattn::attention_kernels();
  const float* qd = q.data<float>();
  float* od = out.data<float>();
  const int64_t items = t_count * hkv;
  // Cost estimate: every query head reads the whole KV head once (2*d multiply-adds per slot).
  const int64_t work = t_count * hq * cache.tokens(layer, 0) * d * 2;
  const int threads = static_cast<int>(std::clamp<int64_t>(
      work / (int64_t{64} << 10), 1, std::min<int64_t>(items, cpu_num_threads())));
  const int g_count = static_cast<int>(group);
#pragma omp parallel num_threads(threads)
  {
    Scratch w(group, d, rows);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t = item / hkv;
      const int kvh = static_cast<int>(item % hkv);
      const int32_t qpos = positions[t];
      const float* q0 = qd + (t * hq + kvh * group) * d;  // the group's query rows, contiguous
      const Tensor* cscale = cache.channel_scales(layer, kvh);
      const float* sk = cscale != nullptr ? cscale->data<float>() : nullptr;
      if (sk != nullptr) {
        for (int64_t g = 0; g < group; ++g) {
          for (int64_t i = 0; i < d; ++i) w.qs[g * d + i] = q0[g * d + i] * sk[i];
        }
      }
      std::fill(w.m.begin(), w.m.end(), kNegInf);
      std::fill(w.sum.begin(), w.sum.end(), 0.0f);
      std::fill(w.acc.begin(), w.acc.end(), 0.0f);
      std::fill(w.acc_s.begin(), w.acc_s.end(), 0.0f);
      bool scaled = false;
      const std::vector<BlockView>& blocks = views[kvh];
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        const BlockView& bv = blocks[bi];
        const KvBlock& b = *bv.b;
        const BlockView* next = bi + 1 < blocks.size() ? &blocks[bi + 1] : nullptr;
        if (next != nullptr) prefetch_side(next->k);  // the next V after this block's scores
        const int32_t* pos = b.positions.data();
        int visible = 0;
        for (int s = 0; s < b.used; ++s) visible += pos[s] <= qpos;
        if (visible == 0) continue;
        const float* qb = b.channel_scaled ? w.qs.data() : q0;
        // Keys and scores.
        const bool fold = b.kq.codec == KvCodec::kChannel;
        const float* kr = rows_f32(kn, b, bv.k, d, fold, w.aux.data(), w.kt.data());
        const float* qk = qb;
        const float* bias = nullptr;
        if (fold) {  // q' = q * scale per channel, b = q . min (aux: scales, then mins)
          const float* scl = w.aux.data();
          const float* mn = scl + d;
          for (int64_t g = 0; g < group; ++g) {
            const float* qg = qb + g * d;
            float* qo = w.qf.data() + g * d;
            float bsum = 0.0f;
            for (int64_t i = 0; i < d; ++i) qo[i] = qg[i] * scl[i], bsum += qg[i] * mn[i];
            w.bias[g] = bsum;
          }
          qk = w.qf.data();
          bias = w.bias.data();
        }
        kn.score(qk, g_count, d, kr, b.used, bias, scale, pos, qpos, w.scores.data(), rows,
                 w.bmax.data());
        // Online softmax: rescale what was accumulated when the running max grows.
        for (int64_t g = 0; g < group; ++g) {
          if (w.bmax[g] > w.m[g]) {
            const float r = std::exp(w.m[g] - w.bmax[g]);  // 0 on the first visible block
            w.sum[g] *= r;
            for (int64_t i = 0; i < d; ++i) w.acc[g * d + i] *= r;
            if (scaled) {
              for (int64_t i = 0; i < d; ++i) w.acc_s[g * d + i] *= r;
            }
            w.m[g] = w.bmax[g];
          }
          w.sum[g] += kn.exp_sub(w.scores.data() + g * rows, b.used, w.m[g], w.p.data() + g * rows);
        }
        // Values.
        if (next != nullptr) prefetch_side(next->v);
        const float* vr = rows_f32(kn, b, bv.v, d, false, w.aux.data(), w.vt.data());
        scaled = scaled || b.channel_scaled;
        kn.accumulate(w.p.data(), g_count, rows, b.used, vr, d,
                      b.channel_scaled ? w.acc_s.data() : w.acc.data());
      }
      const float* sv = sk != nullptr ? sk + d : nullptr;
      for (int64_t g = 0; g < group; ++g) {
        float* o = od + (t * hq + kvh * group + g) * d;
        const float inv = w.sum[g] > 0.0f ? 1.0f / w.sum[g] : 0.0f;
        for (int64_t i = 0; i < d; ++i) {
          const float extra = scaled && sv != nullptr ? w.acc_s[g * d + i] * sv[i] : 0.0f;
          o[i] = (w.acc[g * d + i] + extra) * inv;
        }
      }
    }
  }
}

void cache_attention_quantized(const Tensor& q, std::span<const int32_t> positions,
                               const KvCache& cache, int layer, Tensor& out, float scale) {
  if (!cache.shape().device.is_cpu()) {
    return cache_attention_quantized_gpu(q, positions, cache, layer, out, scale);
  }
  ragged_cache_attention(q, positions, cache, layer, out, scale);
}

}  // namespace tandem::llm
