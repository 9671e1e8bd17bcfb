// SPDX-License-Identifier: Apache-2.0
// The int8-activation GEMV of decode steps (ops::GemmParams::int8_activations) for q8_0 / q4_0 /
// q4_1 weights [N, K]. Two kernels: the activation rows are rounded to int8 blocks once per call
// (one thread per 32-element block), then one warp per weight row walks the row 32 blocks at a
// time: the warp copies the chunk's bytes into its shared-memory stage with 16-byte loads
// (the row's unaligned first and last 16-byte pieces byte by byte, so nothing outside the row is
// read), then each lane computes one block's dot products with the up to kGemvMaxRows activation
// rows (gemv_int8_block.h: __dp4a, scales in f32), and the warp sums the lanes.
#include "common.cuh"
#include "gemv_int8_block.h"

namespace tandem::cuda::k {
namespace {

constexpr int kWarps = 4;
// One chunk: 32 blocks of at most 34 bytes, plus up to 15 bytes before the first 16-byte boundary.
constexpr int kStagePieces = (32 * 34 + 15 + 15) / 16;

__global__ void quantize_activations_kernel(const float* a, int64_t sam, int64_t sak, int m,
                                            int64_t blocks, int8_t* q, float* d, float* s) {
  for (int64_t i = global_thread(); i < m * blocks; i += grid_threads()) {
    const int64_t r = i / blocks, b = i - r * blocks;
    quantize_activation_block(a + r * sam + b * 32 * sak, sak, q + i * 32, d + i, s + i);
  }
}

template <DType T>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_int8_kernel(const int8_t* qa, const float* da, const float* sa, int m, int64_t blocks,
                     const uint8_t* w, float* c, int64_t n, float alpha, float beta) {
  constexpr int64_t kBlockBytes = dtype_block_bytes(T);
  __shared__ uint4 stage_all[kWarps][kStagePieces];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  uint4* stage = stage_all[warp];
  auto* stage_bytes = reinterpret_cast<uint8_t*>(stage);
  const int64_t rb = blocks * kBlockBytes;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kWarps + warp; j < n;
       j += static_cast<int64_t>(gridDim.x) * kWarps) {
    float acc[kGemvMaxRows];
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) acc[i] = 0.0f;
    for (int64_t b0 = 0; b0 < blocks; b0 += 32) {
      const int nb = blocks - b0 < 32 ? static_cast<int>(blocks - b0) : 32;
      const uint8_t* start = w + j * rb + b0 * kBlockBytes;
      const uint8_t* end = start + nb * kBlockBytes;
      const uintptr_t base = reinterpret_cast<uintptr_t>(start) & ~uintptr_t{15};
      const int lead = static_cast<int>(reinterpret_cast<uintptr_t>(start) - base);
      const int pieces = (lead + nb * static_cast<int>(kBlockBytes) + 15) / 16;
      for (int p = lane; p < pieces; p += 32) {
        const auto* src = reinterpret_cast<const uint8_t*>(base + 16 * static_cast<uintptr_t>(p));
        if (src >= start && src + 16 <= end) {
          stage[p] = __ldg(reinterpret_cast<const uint4*>(src));
        } else {
          for (int e = 0; e < 16; ++e)
            if (src + e >= start && src + e < end) stage_bytes[16 * p + e] = __ldg(src + e);
        }
      }
      __syncwarp();
      if (lane < nb) {
        const uint8_t* blk = stage_bytes + lead + lane * kBlockBytes;
#pragma unroll
        for (int i = 0; i < kGemvMaxRows; ++i) {
          if (i < m) {
            const int64_t ab = i * blocks + b0 + lane;
            const auto* q4 = reinterpret_cast<const uint4*>(qa + ab * 32);
            const uint4 lo = __ldg(q4), hi = __ldg(q4 + 1);
            const int words[8] = {static_cast<int>(lo.x), static_cast<int>(lo.y),
                                  static_cast<int>(lo.z), static_cast<int>(lo.w),
                                  static_cast<int>(hi.x), static_cast<int>(hi.y),
                                  static_cast<int>(hi.z), static_cast<int>(hi.w)};
            acc[i] += weight_block_dot<T>(blk, words, __ldg(da + ab), __ldg(sa + ab));
          }
        }
      }
      __syncwarp();  // the stage is rewritten by the next chunk
    }
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) {
      if (i < m) {
        const float sum = warp_sum(acc[i]);
        if (lane == 0) {
          float* out = c + i * n + j;
          *out = beta == 0.0f ? alpha * sum : alpha * sum + beta * *out;
        }
      }
    }
  }
}

}  // namespace

size_t gemv_int8_scratch_bytes(int m, int64_t k) {
  const auto blocks = static_cast<size_t>(m) * static_cast<size_t>(k / 32);
  return blocks * (32 + 2 * sizeof(float));
}

cudaError_t gemv_int8(DType t, const float* a, int64_t a_stride_m, int64_t a_stride_k,
                      const void* w, float* c, int m, int64_t n, int64_t k, float alpha, float beta,
                      void* scratch, cudaStream_t s) {
  if (m <= 0 || n == 0) return cudaSuccess;
  if (m > kGemvMaxRows || k % 32 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = k / 32;
  auto* q = static_cast<int8_t*>(scratch);
  auto* d = reinterpret_cast<float*>(q + m * blocks * 32);
  float* sums = d + m * blocks;
  if (blocks > 0) {
    quantize_activations_kernel<<<grid_for(m * blocks, 128), 128, 0, s>>>(a, a_stride_m, a_stride_k,
                                                                          m, blocks, q, d, sums);
  }
  const unsigned grid = grid_for(n, kWarps);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (t) {
    case DType::kQ8_0:
      gemv_int8_kernel<DType::kQ8_0>
          <<<grid, kWarps * 32, 0, s>>>(q, d, sums, m, blocks, wb, c, n, alpha, beta);
      break;
    case DType::kQ4_0:
      gemv_int8_kernel<DType::kQ4_0>
          <<<grid, kWarps * 32, 0, s>>>(q, d, sums, m, blocks, wb, c, n, alpha, beta);
      break;
    case DType::kQ4_1:
      gemv_int8_kernel<DType::kQ4_1>
          <<<grid, kWarps * 32, 0, s>>>(q, d, sums, m, blocks, wb, c, n, alpha, beta);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
