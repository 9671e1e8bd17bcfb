// SPDX-License-Identifier: Apache-2.0
// Paged attention over the quantized KV blocks of the LLM engine (byte layouts in
// tandem/llm/kv_quant.h), reading the packed codes directly. One thread block per (query row,
// query head); its warps take the KV head's pages round-robin (page p goes to warp p % kWarps, so
// the ragged rows of a mixed 8/4-bit page are walked in order by one warp). A warp walks its page
// slot by slot: every lane decodes its channels j = lane + 32 i of the K row in registers, the
// warp sums q . k, and the lane folds the decoded V channels into a running (max, sum,
// accumulator) online softmax. Channel-scaled pages (QoKV: K / s_k, V / s_v stored) score with
// q * s_k and accumulate V into a second sum that is multiplied by s_v at the end, exactly as the
// CPU kernel (src/llm/kv_quant/attention.cpp) does. The warps' partial states are merged through
// shared memory. A query that sees no slot gets zeros.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

constexpr int kWarps = 8;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kMaxDim = static_cast<int>(kQuantAttentionMaxDim);
constexpr int kPerLane = kMaxDim / 32;

// Codec numbers (llm::KvCodec).
constexpr uint8_t kPlain = 0, kAffine = 1, kBlock32 = 2, kSymmetric = 3;
[[maybe_unused]] constexpr uint8_t kChannel = 4;  // the switches' default branch

__device__ __forceinline__ float f16_at(const uint8_t* p) {
  return half_bits_to_float(load_u16(p));
}

// Unsigned code j of `bits` bits (element j at bit j * bits; 2, 4 and 8 never straddle a byte).
__device__ __forceinline__ int code_at(const uint8_t* codes, int j, int bits) {
  const int bit = j * bits;
  return (codes[bit >> 3] >> (bit & 7)) & ((1 << bits) - 1);
}

// Walks the rows of one side (K or V) of a page.
struct Cursor {
  QuantKvSide sd;
  const uint8_t* rows = nullptr;  // first row (after a per-channel header or a mixed bitmap)
  int64_t row_bytes = 0;          // fixed-size rows
  int64_t off = 0;                // mixed: offset of the next row from `rows`
  int d = 0, g = 1, ng = 1;       // head dim; affine channels per group and groups per row
};

__device__ __forceinline__ Cursor make_cursor(const QuantKvSide& sd, int32_t used, int d) {
  Cursor c;
  c.sd = sd;
  c.rows = sd.data;
  c.d = d;
  const int64_t code = (static_cast<int64_t>(d) * sd.bits + 7) / 8;
  switch (sd.codec) {
    case kPlain:
      c.row_bytes = static_cast<int64_t>(d) * (sd.bits / 8);
      break;
    case kAffine:
      c.g = sd.group == 0 ? d : min(static_cast<int>(sd.group), d);
      c.ng = (d + c.g - 1) / c.g;
      c.row_bytes = 4 * c.ng + code;
      break;
    case kBlock32:
      c.row_bytes = (d + 31) / 32 * (sd.bits == 8 ? 34 : 18);
      break;
    case kSymmetric:
      if (sd.mixed) {
        c.rows = sd.data + (used + 7) / 8;
      } else {
        c.row_bytes = 2 + code;
      }
      break;
    default:  // kChannel: [scale, min] per channel, then the rows
      c.rows = sd.data + 4 * static_cast<int64_t>(d);
      c.row_bytes = code;
      break;
  }
  return c;
}

// Row s of the side; call with s = 0, 1, 2, ... (mixed rows are variable-sized). *wide: the row is
// 8-bit (mixed only). *ok: false when a mixed row would end past the side's bytes.
__device__ __forceinline__ const uint8_t* next_row(Cursor& c, int s, bool* wide, bool* ok) {
  *ok = true;
  *wide = false;
  if (c.sd.codec == kSymmetric && c.sd.mixed) {
    *wide = (c.sd.data[s >> 3] >> (s & 7)) & 1;
    const uint8_t* r = c.rows + c.off;
    c.off += 2 + (*wide ? c.d : (c.d + 1) / 2);
    *ok = (c.rows - c.sd.data) + c.off <= c.sd.bytes;
    return r;
  }
  return c.rows + static_cast<int64_t>(s) * c.row_bytes;
}

// Channel j of row r, decoded as the CPU codecs do (src/llm/kv_quant/codec.cpp).
__device__ __forceinline__ float element(const Cursor& c, const uint8_t* r, bool wide, int j) {
  switch (c.sd.codec) {
    case kPlain:
      if (c.sd.bits == 16) return f16_at(r + 2 * j);
      return reinterpret_cast<const float*>(r)[j];
    case kAffine: {
      const uint8_t* sm = r + 4 * (j / c.g);
      return f16_at(sm + 2) + f16_at(sm) * static_cast<float>(code_at(r + 4 * c.ng, j, c.sd.bits));
    }
    case kBlock32: {
      const uint8_t* o = r + (j >> 5) * (c.sd.bits == 8 ? 34 : 18);
      const int i = j & 31;
      if (c.sd.bits == 8) return f16_at(o) * static_cast<float>(static_cast<int8_t>(o[2 + i]));
      const int q = i < 16 ? (o[2 + i] & 15) : (o[2 + i - 16] >> 4);
      return f16_at(o) * static_cast<float>(q - 8);
    }
    case kSymmetric: {
      const int bits = c.sd.mixed ? (wide ? 8 : 4) : c.sd.bits;
      if (bits == 8) return f16_at(r) * static_cast<float>(static_cast<int8_t>(r[2 + j]));
      return f16_at(r) * static_cast<float>(((r[2 + (j >> 1)] >> ((j & 1) * 4)) & 15) - 8);
    }
    default: {  // kChannel
      const uint8_t* sm = c.sd.data + 4 * j;
      return f16_at(sm + 2) + f16_at(sm) * static_cast<float>(code_at(r, j, c.sd.bits));
    }
  }
}

__global__ void __launch_bounds__(kBlockThreads)
    quantized_paged_attention_kernel(QuantPagedAttentionArgs a) {
  __shared__ float m_sh[kWarps], l_sh[kWarps];
  __shared__ float acc_sh[kWarps][kMaxDim], accs_sh[kWarps][kMaxDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int d = static_cast<int>(a.d);
  const int64_t group = a.hq / a.hkv;
  for (int64_t item = blockIdx.x; item < a.tq * a.hq; item += gridDim.x) {
    const int64_t t = item / a.hq, h = item - t * a.hq, hk = h / group;
    const int32_t qp = a.q_pos[t];
    const float* qr = a.q + item * d;
    const float* sk = a.channel_scales + hk * 2 * d;
    const float* sv = sk + d;
    float qv[kPerLane], qs[kPerLane], acc[kPerLane], accs[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      qv[i] = j < d ? qr[j] : 0.0f;
      qs[i] = j < d ? qv[i] * sk[j] : 0.0f;
      acc[i] = 0.0f;
      accs[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t p = a.head_begin[hk] + warp; p < a.head_begin[hk + 1]; p += kWarps) {
      const QuantKvPageDesc pg = a.pages[p];
      const bool scaled = pg.channel_scaled != 0;
      Cursor kc = make_cursor(pg.k, pg.used, d), vc = make_cursor(pg.v, pg.used, d);
      for (int s = 0; s < pg.used; ++s) {
        bool kw, vw, kok, vok;
        const uint8_t* kr = next_row(kc, s, &kw, &kok);
        const uint8_t* vr = next_row(vc, s, &vw, &vok);
        if (!kok || !vok) break;             // a malformed mixed page: never read past it
        if (pg.positions[s] > qp) continue;  // causal: the same answer in every lane
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int j = lane + 32 * i;
          if (j < d) dot += (scaled ? qs[i] : qv[i]) * element(kc, kr, kw, j);
        }
        const float score = warp_sum(dot) * a.scale;
        const float m_new = fmaxf(m, score);
        const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
        const float pe = expf(score - m_new);
        l = l * corr + pe;
        m = m_new;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int j = lane + 32 * i;
          const float x = j < d ? pe * element(vc, vr, vw, j) : 0.0f;
          acc[i] = acc[i] * corr + (scaled ? 0.0f : x);
          accs[i] = accs[i] * corr + (scaled ? x : 0.0f);
        }
      }
    }
    // Merge the warps' partial softmax states.
    if (lane == 0) m_sh[warp] = m, l_sh[warp] = l;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      if (j < d) acc_sh[warp][j] = acc[i], accs_sh[warp][j] = accs[i];
    }
    __syncthreads();
    float m_all = -INFINITY;
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, m_sh[w]);
    float l_all = 0.0f;
    for (int w = 0; w < kWarps; ++w) {
      if (m_sh[w] != -INFINITY) l_all += expf(m_sh[w] - m_all) * l_sh[w];
    }
    const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
    float* outr = a.out + item * d;
    for (int j = threadIdx.x; j < d; j += kBlockThreads) {
      float o = 0.0f, os = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        if (m_sh[w] == -INFINITY) continue;
        const float e = expf(m_sh[w] - m_all);
        o += e * acc_sh[w][j];
        os += e * accs_sh[w][j];
      }
      outr[j] = (o + os * sv[j]) * inv;
    }
    __syncthreads();  // the shared state is rewritten by the next item
  }
}

}  // namespace

cudaError_t quantized_paged_attention(const QuantPagedAttentionArgs& a, cudaStream_t s) {
  const int64_t items = a.tq * a.hq;
  if (items == 0) return cudaSuccess;
  if (a.d <= 0 || a.d > kQuantAttentionMaxDim || a.hkv <= 0) return cudaErrorInvalidValue;
  quantized_paged_attention_kernel<<<grid_for(items, 1), kBlockThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
