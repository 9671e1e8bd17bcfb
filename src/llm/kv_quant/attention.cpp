// SPDX-License-Identifier: Apache-2.0
// Attention that reads quantized K/V codes directly; see attention.h.
#include "attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attention_cuda.h"
#include "tandem/core/backend.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Compiled for AVX-512, AVX2+FMA and baseline x86-64 like the f32 kernel (model_attention.cpp).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(TANDEM_SANITIZED)
#define TANDEM_KVQ_CLONES \
  __attribute__((target_clones("arch=skylake-avx512", "arch=haswell", "default")))
#else
#define TANDEM_KVQ_CLONES
#endif

float half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Row decoders: x[0, d) from one encoded row. Each is a straight loop over the codes.
TANDEM_KVQ_CLONES void decode_sym8(const uint8_t* r, int64_t d, float* x) {
  const float s = half(r);
  const auto* c = reinterpret_cast<const int8_t*>(r + 2);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) x[i] = s * static_cast<float>(c[i]);
}

TANDEM_KVQ_CLONES void decode_sym4(const uint8_t* r, int64_t d, float* x) {
  const float s = half(r);
  const uint8_t* c = r + 2;
  const int64_t pairs = d / 2;
#pragma omp simd
  for (int64_t j = 0; j < pairs; ++j) {
    x[2 * j] = s * static_cast<float>((c[j] & 15) - 8);
    x[2 * j + 1] = s * static_cast<float>((c[j] >> 4) - 8);
  }
  if (d & 1) x[d - 1] = s * static_cast<float>((c[pairs] & 15) - 8);
}

TANDEM_KVQ_CLONES void decode_block32(int bits, const uint8_t* r, int64_t d, float* x) {
  const int64_t nb = (d + 31) / 32, bb = bits == 8 ? 34 : 18;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = r + b * bb;
    const float s = half(o);
    const int64_t n = std::min<int64_t>(32, d - b * 32);
    float* y = x + b * 32;
    if (bits == 8) {
      const auto* c = reinterpret_cast<const int8_t*>(o + 2);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) y[i] = s * static_cast<float>(c[i]);
    } else if (n == 32) {
#pragma omp simd
      for (int i = 0; i < 16; ++i) {
        y[i] = s * static_cast<float>((o[2 + i] & 15) - 8);
        y[i + 16] = s * static_cast<float>((o[2 + i] >> 4) - 8);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = s * static_cast<float>((i < 16 ? (o[2 + i] & 15) : (o[2 + i - 16] >> 4)) - 8);
      }
    }
  }
}

// Unsigned codes of `bits` bits (element i at bit i*bits) as floats: straight loops over whole
// bytes (2 or 4 codes each) so they vectorise; x needs room for d rounded up to 4.
TANDEM_KVQ_CLONES void unpack_codes(int bits, const uint8_t* codes, int64_t d, float* x) {
  if (bits == 8) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) x[i] = static_cast<float>(codes[i]);
  } else if (bits == 4) {
    const int64_t n = (d + 1) / 2;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      x[2 * j] = static_cast<float>(codes[j] & 15);
      x[2 * j + 1] = static_cast<float>(codes[j] >> 4);
    }
  } else {
    const int64_t n = (d + 3) / 4;
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) {
      x[4 * j] = static_cast<float>(codes[j] & 3);
      x[4 * j + 1] = static_cast<float>((codes[j] >> 2) & 3);
      x[4 * j + 2] = static_cast<float>((codes[j] >> 4) & 3);
      x[4 * j + 3] = static_cast<float>(codes[j] >> 6);
    }
  }
}

// x = min + scale * code with one (scale, min) per group of g channels.
TANDEM_KVQ_CLONES void decode_affine(int bits, const uint8_t* codes, const float* scl,
                                     const float* mn, int64_t g, int64_t d, float* x) {
  unpack_codes(bits, codes, d, x);
  for (int64_t lo = 0, j = 0; lo < d; lo += g, ++j) {
    const int64_t hi = std::min(d, lo + g);
    const float s = scl[j], m = mn[j];
#pragma omp simd
    for (int64_t i = lo; i < hi; ++i) x[i] = m + s * x[i];
  }
}

// x = min[c] + scale[c] * code per channel (KIVI keys).
TANDEM_KVQ_CLONES void decode_channel(int bits, const uint8_t* codes, const float* scl,
                                      const float* mn, int64_t d, float* x) {
  unpack_codes(bits, codes, d, x);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) x[i] = mn[i] + scl[i] * x[i];
}

TANDEM_KVQ_CLONES float dot(const float* a, const float* b, int64_t d) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += a[i] * b[i];
  return s;
}

TANDEM_KVQ_CLONES void axpy(float p, const float* x, int64_t d, float* acc) {
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) acc[i] += p * x[i];
}

// Walks the rows of one block's K or V and decodes them one at a time.
class RowReader {
 public:
  RowReader(const KvBlock& b, const Tensor& t, const KvQuantFormat& f, int64_t d)
      : f_(f), d_(d), base_(static_cast<const uint8_t*>(t.raw_data())), dtype_(b.dtype) {
    const int64_t code = (d * f.bits + 7) / 8;
    switch (f.codec) {
      case KvCodec::kPlain:
        row_ = dtype_row_bytes(b.dtype, d);
        break;
      case KvCodec::kAffine: {
        g_ = f.group == 0 ? d : std::min<int64_t>(f.group, d);
        ng_ = (d + g_ - 1) / g_;
        row_ = ng_ * 4 + code;
        scl_.resize(static_cast<size_t>(ng_)), mn_.resize(scl_.size());
        break;
      }
      case KvCodec::kBlock32:
        row_ = (d + 31) / 32 * (f.bits == 8 ? 34 : 18);
        break;
      case KvCodec::kSymmetric:
        if (f.mixed) {
          map_ = base_;
          cur_ = base_ + (b.used + 7) / 8;
        } else {
          row_ = 2 + code;
        }
        break;
      case KvCodec::kChannel: {  // per-channel scale and min of the block, then the rows
        g_ = 1;
        row_ = code;
        scl_.resize(static_cast<size_t>(d)), mn_.resize(scl_.size());
        for (int64_t c = 0; c < d; ++c)
          scl_[c] = half(base_ + c * 4), mn_[c] = half(base_ + c * 4 + 2);
        base_ += d * 4;
        break;
      }
    }
  }

  // Row s (called with s = 0, 1, 2, ... in order): a pointer to d floats.
  const float* row(int64_t s, float* tmp) {
    switch (f_.codec) {
      case KvCodec::kPlain:
        if (dtype_ == DType::kF32) return reinterpret_cast<const float*>(base_) + s * d_;
        {
          const auto* h = reinterpret_cast<const uint16_t*>(base_) + s * d_;
          for (int64_t i = 0; i < d_; ++i) tmp[i] = f16_to_f32(h[i]);
        }
        return tmp;
      case KvCodec::kAffine: {
        const uint8_t* r = base_ + s * row_;
        for (int64_t j = 0; j < ng_; ++j) scl_[j] = half(r + 4 * j), mn_[j] = half(r + 4 * j + 2);
        decode_affine(f_.bits, r + ng_ * 4, scl_.data(), mn_.data(), g_, d_, tmp);
        return tmp;
      }
      case KvCodec::kBlock32:
        decode_block32(f_.bits, base_ + s * row_, d_, tmp);
        return tmp;
      case KvCodec::kSymmetric: {
        if (!f_.mixed) {
          (f_.bits == 8 ? decode_sym8 : decode_sym4)(base_ + s * row_, d_, tmp);
          return tmp;
        }
        const bool wide = (map_[s / 8] >> (s % 8)) & 1;
        (wide ? decode_sym8 : decode_sym4)(cur_, d_, tmp);
        cur_ += 2 + (wide ? d_ : (d_ + 1) / 2);
        return tmp;
      }
      case KvCodec::kChannel:
        decode_channel(f_.bits, base_ + s * row_, scl_.data(), mn_.data(), d_, tmp);
        return tmp;
    }
    return tmp;
  }

 private:
  KvQuantFormat f_;
  int64_t d_;
  const uint8_t* base_;
  DType dtype_;
  int64_t row_ = 0, g_ = 1, ng_ = 1;
  const uint8_t* map_ = nullptr;
  const uint8_t* cur_ = nullptr;
  std::vector<float> scl_, mn_;
};

}  // namespace

void cache_attention_quantized(const Tensor& q, std::span<const int32_t> positions,
                               const KvCache& cache, int layer, Tensor& out, float scale) {
  if (!cache.shape().device.is_cpu()) {
    return cache_attention_quantized_gpu(q, positions, cache, layer, out, scale);
  }
  const KvCacheShape& cs = cache.shape();
  const int64_t t_count = q.size(0), hq = q.size(1), d = cs.head_dim, hkv = cs.n_kv_heads;
  const int64_t group = hq / hkv;
  for (int h = 0; h < hkv; ++h) {
    for (const KvBlock& b : cache.blocks(layer, h)) {  // also validates the layer
      if (b.channel_scaled && cache.channel_scales(layer, h) == nullptr) {
        throw InvalidArgument(cat("cache_attention: channel-scaled block without scales (layer ",
                                  layer, ", head ", h, ")"));
      }
      if (!b.quantized() && b.dtype != DType::kF32 && b.dtype != DType::kF16) {
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
    std::vector<float> scores(static_cast<size_t>(group * bt));
    std::vector<float> acc(static_cast<size_t>(group * d)), acc_s(acc.size());
    std::vector<float> qs(static_cast<size_t>(group * d)), m(group), sum(group);
    std::vector<float> kt(static_cast<size_t>(d + 4)), vt(static_cast<size_t>(d + 4));
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t t = item / hkv;
      const int kvh = static_cast<int>(item % hkv);
      const int32_t qpos = positions[t];
      const float* q0 = qd + (t * hq + kvh * group) * d;
      const Tensor* cscale = cache.channel_scales(layer, kvh);
      const float* sk = cscale != nullptr ? cscale->data<float>() : nullptr;
      if (sk != nullptr) {
        for (int64_t g = 0; g < group; ++g) {
          for (int64_t i = 0; i < d; ++i) qs[g * d + i] = q0[g * d + i] * sk[i];
        }
      }
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(acc_s.begin(), acc_s.end(), 0.0f);
      for (const KvBlock& b : cache.blocks(layer, kvh)) {
        int visible = 0;
        for (int s = 0; s < b.used; ++s) visible += b.positions[s] <= qpos;
        if (visible == 0) continue;
        const float* qb = b.channel_scaled ? qs.data() : q0;
        RowReader kr(b, b.k, b.kq, d);
        for (int s = 0; s < b.used; ++s) {
          const float* krow = kr.row(s, kt.data());  // decoded in order (mixed rows walk)
          const bool sees = b.positions[s] <= qpos;
          for (int64_t g = 0; g < group; ++g) {
            scores[g * bt + s] = sees ? dot(qb + g * d, krow, d) * scale : kNegInf;
          }
        }
        RowReader vr(b, b.v, b.vq, d);
        float* a = b.channel_scaled ? acc_s.data() : acc.data();
        for (int64_t g = 0; g < group; ++g) {
          const float* sc = scores.data() + g * bt;
          const float bmax = *std::max_element(sc, sc + b.used);
          if (bmax > m[g]) {
            const float r = std::exp(m[g] - bmax);  // 0 on the first visible block
            sum[g] *= r;
            for (int64_t i = 0; i < d; ++i) acc[g * d + i] *= r, acc_s[g * d + i] *= r;
            m[g] = bmax;
          }
        }
        for (int s = 0; s < b.used; ++s) {
          const float* vrow = vr.row(s, vt.data());
          if (b.positions[s] > qpos) continue;
          for (int64_t g = 0; g < group; ++g) {
            const float p = std::exp(scores[g * bt + s] - m[g]);
            sum[g] += p;
            axpy(p, vrow, d, a + g * d);
          }
        }
      }
      const float* sv = sk != nullptr ? sk + d : nullptr;
      for (int64_t g = 0; g < group; ++g) {
        float* o = od + (t * hq + kvh * group + g) * d;
        const float inv = sum[g] > 0.0f ? 1.0f / sum[g] : 0.0f;
        for (int64_t i = 0; i < d; ++i) {
          const float extra = sv != nullptr ? acc_s[g * d + i] * sv[i] : 0.0f;
          o[i] = (acc[g * d + i] + extra) * inv;
        }
      }
    }
  }
}

}  // namespace tandem::llm
