// SPDX-License-Identifier: Apache-2.0
// Paged attention over the LLM engine's ragged KV store, read in place. One block per (query row,
// query head) in a grid-stride loop; the head's pages are walked in order, each in tiles of
// kKeyTile slots: warps score the tile's visible slots (lanes split the head dimension; masked
// slots score -inf), then the block folds the tile into a running max / sum / accumulator (online
// softmax). Pages may be f32 or f16 (converted while loading). Shared memory: q (d floats), the
// accumulator (d floats) and the tile's scores.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

constexpr int kPagedThreads = 128;
constexpr int kPagedWarps = kPagedThreads / 32;
constexpr int kKeyTile = 64;

__device__ __forceinline__ float row_element(const PagedPage& pg, const void* rows, int64_t slot,
                                             int64_t j, int64_t d) {
  if (pg.f16) return __half2float(static_cast<const __half*>(rows)[slot * d + j]);
  return static_cast<const float*>(rows)[slot * d + j];
}

__global__ void __launch_bounds__(kPagedThreads) paged_attention_kernel(PagedAttentionArgs a) {
  extern __shared__ float smem[];
  float* q_s = smem;       // [d], pre-scaled query row
  float* acc = q_s + a.d;  // [d]
  float* p_s = acc + a.d;  // [kKeyTile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = a.hq / a.hkv;
  for (int64_t item = blockIdx.x; item < a.tq * a.hq; item += gridDim.x) {
    const int64_t i = item / a.hq, h = item - i * a.hq, hk = h / group;
    const int32_t qp = a.q_pos[i];
    const float* qr = a.q + item * a.d;
    for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) {
      q_s[j] = qr[j] * a.scale;
      acc[j] = 0.0f;
    }
    __syncthreads();
    float m_run = -INFINITY, l_run = 0.0f;
    for (int64_t p = a.head_begin[hk]; p < a.head_begin[hk + 1]; ++p) {
      const PagedPage pg = a.pages[p];
      for (int32_t t0 = 0; t0 < pg.used; t0 += kKeyTile) {
        const int nt = pg.used - t0 < kKeyTile ? pg.used - t0 : kKeyTile;
        for (int kk = warp; kk < nt; kk += kPagedWarps) {
          const int64_t slot = t0 + kk;
          float s = -INFINITY;
          if (pg.positions[slot] <= qp) {
            s = 0.0f;
            for (int64_t j = lane; j < a.d; j += 32)
              s += q_s[j] * row_element(pg, pg.k, slot, j, a.d);
            s = warp_sum(s);
          }
          if (lane == 0) p_s[kk] = s;
        }
        __syncthreads();
        float tmax = -INFINITY;
        for (int kk = 0; kk < nt; ++kk) tmax = fmaxf(tmax, p_s[kk]);
        __syncthreads();                  // every thread has read the raw scores
        if (tmax == -INFINITY) continue;  // the whole tile is masked (same answer in every thread)
        const float m_new = fmaxf(m_run, tmax);
        const float corr = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
        for (int kk = threadIdx.x; kk < nt; kk += blockDim.x) p_s[kk] = expf(p_s[kk] - m_new);
        __syncthreads();
        float tsum = 0.0f;
        for (int kk = 0; kk < nt; ++kk) tsum += p_s[kk];
        l_run = l_run * corr + tsum;
        m_run = m_new;
        for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) {
          float o = acc[j] * corr;
          for (int kk = 0; kk < nt; ++kk) o += p_s[kk] * row_element(pg, pg.v, t0 + kk, j, a.d);
          acc[j] = o;
        }
        __syncthreads();  // p_s is rewritten by the next tile
      }
    }
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    float* outr = a.out + item * a.d;
    for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) outr[j] = acc[j] * inv;
    __syncthreads();  // q_s and acc are rewritten by the next item
  }
}

}  // namespace

size_t paged_attention_smem_bytes(int64_t d) {
  return static_cast<size_t>(2 * d + kKeyTile) * sizeof(float);
}

cudaError_t paged_attention(const PagedAttentionArgs& a, cudaStream_t s) {
  const int64_t items = a.tq * a.hq;
  if (items == 0) return cudaSuccess;
  const size_t smem = paged_attention_smem_bytes(a.d);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(paged_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  paged_attention_kernel<<<grid_for(items, 1), kPagedThreads, smem, s>>>(a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
