// SPDX-License-Identifier: Apache-2.0
// Scaled dot-product attention with grouped-query heads (one sequence), correctness first.
// One block per (query row, head), items in a grid-stride loop. Keys are visited in tiles of
// kKeyTile: each warp scores keys of the tile (lanes split the head dimension), then the block
// folds the tile into a running max / sum / output accumulator (online softmax), so any number of
// keys fits in fixed shared memory: q (d floats), the accumulator (dv floats) and the tile's
// scores. attention_probs recomputes selected rows' full softmax into the probs tensor (scores,
// then exp, then normalisation in place).
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

constexpr int kAttnThreads = 128;
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kKeyTile = 64;

__device__ __forceinline__ int64_t visible_keys(const AttentionArgs& a, int64_t i) {
  if (!a.causal) return a.tk;
  const int64_t lim = a.q_offset + i + 1;
  return lim < a.tk ? lim : a.tk;
}

__global__ void __launch_bounds__(kAttnThreads) attention_kernel(AttentionArgs a) {
  extern __shared__ float smem[];
  float* q_s = smem;        // [d], pre-scaled query row
  float* acc = q_s + a.d;   // [dv]
  float* p_s = acc + a.dv;  // [kKeyTile]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = a.hq / a.hkv;
  for (int64_t item = blockIdx.x; item < a.tq * a.hq; item += gridDim.x) {
    const int64_t i = item / a.hq, h = item - i * a.hq, hk = h / group;
    const float* qr = a.q + item * a.d;
    for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) q_s[j] = qr[j] * a.scale;
    for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) acc[j] = 0.0f;
    __syncthreads();
    const int64_t limit = visible_keys(a, i);
    float m_run = -INFINITY, l_run = 0.0f;
    for (int64_t t0 = 0; t0 < limit; t0 += kKeyTile) {
      const int nt = static_cast<int>(limit - t0 < kKeyTile ? limit - t0 : kKeyTile);
      for (int kk = warp; kk < nt; kk += kAttnWarps) {
        const float* kr = a.k + ((t0 + kk) * a.hkv + hk) * a.d;
        float s = 0.0f;
        for (int64_t j = lane; j < a.d; j += 32) s += q_s[j] * kr[j];
        s = warp_sum(s);
        if (lane == 0) p_s[kk] = s;
      }
      __syncthreads();
      float tmax = -INFINITY;
      for (int kk = 0; kk < nt; ++kk) tmax = fmaxf(tmax, p_s[kk]);
      const float m_new = fmaxf(m_run, tmax);
      const float corr = m_run == -INFINITY ? 0.0f : expf(m_run - m_new);
      __syncthreads();  // every thread has read the raw scores
      for (int kk = threadIdx.x; kk < nt; kk += blockDim.x) p_s[kk] = expf(p_s[kk] - m_new);
      __syncthreads();
      float tsum = 0.0f;
      for (int kk = 0; kk < nt; ++kk) tsum += p_s[kk];
      l_run = l_run * corr + tsum;
      m_run = m_new;
      for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) {
        float o = acc[j] * corr;
        const float* vr = a.v + (t0 * a.hkv + hk) * a.dv + j;
        for (int kk = 0; kk < nt; ++kk) o += p_s[kk] * vr[kk * a.hkv * a.dv];
        acc[j] = o;
      }
      __syncthreads();  // p_s is rewritten by the next tile
    }
    const float inv = l_run > 0.0f ? 1.0f / l_run : 0.0f;
    float* outr = a.out + item * a.dv;
    for (int64_t j = threadIdx.x; j < a.dv; j += blockDim.x) outr[j] = acc[j] * inv;
    __syncthreads();  // q_s and acc are rewritten by the next item
  }
}

__global__ void __launch_bounds__(kAttnThreads)
    attention_probs_kernel(AttentionArgs a, const int64_t* rows, int64_t n_rows, float* probs) {
  extern __shared__ float q_s[];  // [d]
  __shared__ float scratch[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = a.hq / a.hkv;
  for (int64_t item = blockIdx.x; item < n_rows * a.hq; item += gridDim.x) {
    const int64_t h = item / n_rows, r = item - h * n_rows, i = rows[r], hk = h / group;
    float* pr = probs + item * a.tk;  // probs[h, r, :]
    const float* qr = a.q + (i * a.hq + h) * a.d;
    for (int64_t j = threadIdx.x; j < a.d; j += blockDim.x) q_s[j] = qr[j] * a.scale;
    __syncthreads();
    const int64_t limit = visible_keys(a, i);
    for (int64_t t = warp; t < limit; t += kAttnWarps) {
      const float* kr = a.k + (t * a.hkv + hk) * a.d;
      float s = 0.0f;
      for (int64_t j = lane; j < a.d; j += 32) s += q_s[j] * kr[j];
      s = warp_sum(s);
      if (lane == 0) pr[t] = s;
    }
    __syncthreads();  // also orders the global writes above for the whole block
    float m = -INFINITY;
    for (int64_t t = threadIdx.x; t < limit; t += blockDim.x) m = fmaxf(m, pr[t]);
    m = block_max(m, scratch);
    float sum = 0.0f;
    for (int64_t t = threadIdx.x; t < limit; t += blockDim.x) {
      const float e = expf(pr[t] - m);
      pr[t] = e;
      sum += e;
    }
    sum = block_sum(sum, scratch);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t t = threadIdx.x; t < a.tk; t += blockDim.x) pr[t] = t < limit ? pr[t] * inv : 0.0f;
    __syncthreads();  // q_s is rewritten by the next item
  }
}

}  // namespace

size_t attention_smem_bytes(int64_t d, int64_t dv) {
  return static_cast<size_t>(d + dv + kKeyTile) * sizeof(float);
}

cudaError_t attention(const AttentionArgs& a, cudaStream_t s) {
  const int64_t items = a.tq * a.hq;
  if (items == 0) return cudaSuccess;
  const size_t smem = attention_smem_bytes(a.d, a.dv);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  attention_kernel<<<grid_for(items, 1), kAttnThreads, smem, s>>>(a);
  return cudaGetLastError();
}

cudaError_t attention_probs(const AttentionArgs& a, const int64_t* rows, int64_t n_rows,
                            float* probs, cudaStream_t s) {
  const int64_t items = n_rows * a.hq;
  if (items == 0 || a.tk == 0) return cudaSuccess;
  const size_t smem = static_cast<size_t>(a.d) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(attention_probs_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  attention_probs_kernel<<<grid_for(items, 1), kAttnThreads, smem, s>>>(a, rows, n_rows, probs);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
