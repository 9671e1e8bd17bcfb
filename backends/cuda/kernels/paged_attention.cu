// SPDX-License-Identifier: Apache-2.0
// Paged attention over the LLM engine's ragged KV store, read in place, flash-decoding style (the
// chunk and merge math is in flash_decode.h). Split: one block per (query row, chunk of a KV
// head's slots) in a grid-stride loop. The chunk is walked in tiles of kKeyTile slots: warps score
// the tile's slots for every query head of the GQA group (lanes split the head dimension; each K
// element is loaded once and used for the whole group; masked slots score -inf), one warp per head
// folds the tile into that head's running max / sum, then threads over the head dimension add the
// weighted V rows to every head's accumulator (each V element loaded once for the group). The
// chunk's per-head (max, sum, accumulator) go to a scratch buffer. Merge: one block per (query
// row, query head) rescales and adds its head's chunk partials. Pages may be f32 or f16 (converted
// while loading). Split shared memory: the group's scaled query rows and accumulators (2 group d
// floats), the tile's weights (group kKeyTile floats) and per-head max / sum / rescale factor.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

constexpr int kPagedThreads = 128;
constexpr int kPagedWarps = kPagedThreads / 32;
constexpr int kKeyTile = 64;
constexpr int kHeadsPerPass = 8;  // query heads whose partial dot products one lane holds at once

__device__ __forceinline__ float row_element(const PagedPage& pg, const void* rows, int64_t slot,
                                             int64_t j, int64_t d) {
  if (pg.f16) return __half2float(static_cast<const __half*>(rows)[slot * d + j]);
  return static_cast<const float*>(rows)[slot * d + j];
}

struct UsedOf {
  const PagedPage* pages;
  __host__ __device__ int64_t operator()(int32_t p) const { return pages[p].used; }
};

__global__ void __launch_bounds__(kPagedThreads) paged_split_kernel(PagedAttentionArgs a) {
  extern __shared__ float smem[];
  const int64_t group = a.hq / a.hkv, gd = group * a.d;
  float* q_s = smem;                    // [group, d], scaled query rows
  float* acc = q_s + gd;                // [group, d]
  float* p_s = acc + gd;                // [group, kKeyTile]: scores, then weights
  float* m_s = p_s + group * kKeyTile;  // [group]
  float* l_s = m_s + group;             // [group]
  float* c_s = l_s + group;             // [group]: the tile's rescale factor
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const UsedOf used{a.pages};
  for (int64_t item = blockIdx.x; item < a.tq * a.n_chunks; item += gridDim.x) {
    const int64_t i = item / a.n_chunks, c = item - i * a.n_chunks;
    const FlashChunk ch = a.chunks[c];
    const int32_t qp = a.q_pos[i];
    const float* qr = a.q + (i * a.hq + static_cast<int64_t>(ch.head) * group) * a.d;
    for (int64_t x = threadIdx.x; x < gd; x += blockDim.x) {
      q_s[x] = qr[x] * a.scale;
      acc[x] = 0.0f;
    }
    for (int64_t g = threadIdx.x; g < group; g += blockDim.x) {
      m_s[g] = -INFINITY;
      l_s[g] = 0.0f;
    }
    __syncthreads();
    int32_t page = ch.page, slot = ch.slot;
    for (int32_t t0 = 0; t0 < ch.count; t0 += kKeyTile) {
      const int nt = ch.count - t0 < kKeyTile ? ch.count - t0 : kKeyTile;
      for (int kk = warp; kk < nt; kk += kPagedWarps) {
        int32_t pp = page, ss = slot;
        advance_slots(pp, ss, kk, used);
        const PagedPage pg = a.pages[pp];
        const bool visible = pg.positions[ss] <= qp;
        for (int64_t g0 = 0; g0 < group; g0 += kHeadsPerPass) {
          float s[kHeadsPerPass];
#pragma unroll
          for (int g = 0; g < kHeadsPerPass; ++g) s[g] = 0.0f;
          if (visible) {
            for (int64_t j = lane; j < a.d; j += 32) {
              const float kv = row_element(pg, pg.k, ss, j, a.d);
#pragma unroll
              for (int g = 0; g < kHeadsPerPass; ++g)
                if (g0 + g < group) s[g] += q_s[(g0 + g) * a.d + j] * kv;
            }
          }
#pragma unroll
          for (int g = 0; g < kHeadsPerPass; ++g) {
            if (g0 + g < group) {
              const float v = warp_sum(s[g]);
              if (lane == 0) p_s[(g0 + g) * kKeyTile + kk] = visible ? v : -INFINITY;
            }
          }
        }
      }
      __syncthreads();
      for (int64_t g = warp; g < group; g += kPagedWarps) {
        float* pg_s = p_s + g * kKeyTile;
        const float x0 = lane < nt ? pg_s[lane] : -INFINITY;
        const float x1 = lane + 32 < nt ? pg_s[lane + 32] : -INFINITY;
        const float m_old = m_s[g], m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1)));
        const float w0 = weight(x0, m_new), w1 = weight(x1, m_new);
        if (lane < nt) pg_s[lane] = w0;
        if (lane + 32 < nt) pg_s[lane + 32] = w1;
        const float tsum = warp_sum(w0 + w1);
        if (lane == 0) {
          const float corr = rescale(m_old, m_new);
          m_s[g] = m_new;
          l_s[g] = l_s[g] * corr + tsum;
          c_s[g] = corr;
        }
      }
      __syncthreads();
      for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) {
        for (int64_t g0 = 0; g0 < group; g0 += kHeadsPerPass) {
          float o[kHeadsPerPass];
#pragma unroll
          for (int g = 0; g < kHeadsPerPass; ++g)
            o[g] = g0 + g < group ? acc[(g0 + g) * a.d + j] * c_s[g0 + g] : 0.0f;
          int32_t pp = page, ss = slot;
          for (int kk = 0; kk < nt; ++kk) {
            const PagedPage& pg = a.pages[pp];
            const float vv = row_element(pg, pg.v, ss, j, a.d);
#pragma unroll
            for (int g = 0; g < kHeadsPerPass; ++g)
              if (g0 + g < group) o[g] += p_s[(g0 + g) * kKeyTile + kk] * vv;
            if (kk + 1 < nt) advance_slots(pp, ss, 1, used);
          }
#pragma unroll
          for (int g = 0; g < kHeadsPerPass; ++g)
            if (g0 + g < group) acc[(g0 + g) * a.d + j] = o[g];
        }
      }
      if (t0 + nt < ch.count) advance_slots(page, slot, nt, used);
      __syncthreads();  // p_s and c_s are rewritten by the next tile
    }
    float* part = a.partial + (i * a.n_chunks + c) * group * (a.d + 2);
    for (int64_t x = threadIdx.x; x < gd; x += blockDim.x) {
      const int64_t g = x / a.d;
      part[g * (a.d + 2) + 2 + (x - g * a.d)] = acc[x];
    }
    for (int64_t g = threadIdx.x; g < group; g += blockDim.x) {
      part[g * (a.d + 2)] = m_s[g];
      part[g * (a.d + 2) + 1] = l_s[g];
    }
    __syncthreads();  // q_s, acc and the states are rewritten by the next item
  }
}

__global__ void __launch_bounds__(kPagedThreads) paged_merge_kernel(PagedAttentionArgs a) {
  const int64_t group = a.hq / a.hkv, stride = group * (a.d + 2);
  for (int64_t item = blockIdx.x; item < a.tq * a.hq; item += gridDim.x) {
    const int64_t i = item / a.hq, h = item - i * a.hq, hk = h / group;
    const int64_t c0 = a.head_chunk_begin[hk], n = a.head_chunk_begin[hk + 1] - c0;
    const float* base = a.partial + (i * a.n_chunks + c0) * stride + (h - hk * group) * (a.d + 2);
    float inv = 0.0f;
    const float mx = n > 0 ? merge_states(base, base + 1, n, stride, &inv) : -INFINITY;
    for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) {
      float o = 0.0f;
      for (int64_t cc = 0; cc < n; ++cc)
        o += rescale(base[cc * stride], mx) * base[cc * stride + 2 + j];
      a.out[item * a.d + j] = o * inv;
    }
  }
}

}  // namespace

size_t paged_attention_smem_bytes(int64_t d, int64_t group) {
  return static_cast<size_t>(2 * group * d + group * kKeyTile + 3 * group) * sizeof(float);
}

int64_t paged_attention_partial_floats(int64_t tq, int64_t n_chunks, int64_t group, int64_t d) {
  return tq * n_chunks * group * (d + 2);
}

cudaError_t paged_attention(const PagedAttentionArgs& a, cudaStream_t s) {
  if (a.tq * a.hq == 0) return cudaSuccess;
  if (a.tq * a.n_chunks > 0) {
    const size_t smem = paged_attention_smem_bytes(a.d, a.hq / a.hkv);
    if (smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          paged_split_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return e;
    }
    paged_split_kernel<<<grid_for(a.tq * a.n_chunks, 1), kPagedThreads, smem, s>>>(a);
  }
  paged_merge_kernel<<<grid_for(a.tq * a.hq, 1), kPagedThreads, 0, s>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
