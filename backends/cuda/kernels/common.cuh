// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the kernels: grid sizing for grid-stride loops, warp and block
// reductions, and element decoding of every tandem dtype (GGUF block layouts as documented in
// tandem/core/dtype.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace tandem::cuda::k {

inline constexpr int kThreads = 256;            // block size of elementwise kernels
inline constexpr int64_t kMaxBlocks = 1 << 16;  // grid cap; kernels loop over the rest

inline unsigned grid_for(int64_t work, int per_block = kThreads) {
  int64_t blocks = (work + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  return static_cast<unsigned>(blocks);
}

__device__ __forceinline__ int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max over the block; every thread gets the result. `scratch` holds 32 floats; the block size
// is a multiple of 32. Contains __syncthreads(): call from all threads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

// Little-endian 16-bit load from any byte address (block scales sit at 2-byte granularity).
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (static_cast<uint16_t>(p[1]) << 8));
}
__device__ __forceinline__ float half_bits_to_float(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf16_bits_to_float(uint16_t h) {
  return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t float_to_half_bits(float f) {
  return __half_as_ushort(__float2half_rn(f));
}
__device__ __forceinline__ uint16_t float_to_bf16_bits(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// Element j of a row of weight dtype t starting at `row` (f32, f16, bf16, q8_0, q4_0, q4_1).
__device__ __forceinline__ float load_weight(DType t, const uint8_t* row, int64_t j) {
  switch (t) {
    case DType::kF32:
      return reinterpret_cast<const float*>(row)[j];
    case DType::kF16:
      return half_bits_to_float(load_u16(row + 2 * j));
    case DType::kBF16:
      return bf16_bits_to_float(load_u16(row + 2 * j));
    case DType::kQ8_0: {
      const uint8_t* b = row + (j / 32) * 34;
      return half_bits_to_float(load_u16(b)) *
             static_cast<float>(static_cast<int8_t>(b[2 + j % 32]));
    }
    case DType::kQ4_0: {
      const uint8_t* b = row + (j / 32) * 18;
      const int i = static_cast<int>(j % 32);
      const int q = i < 16 ? (b[2 + i] & 0x0f) : (b[2 + i - 16] >> 4);
      return half_bits_to_float(load_u16(b)) * static_cast<float>(q - 8);
    }
    case DType::kQ4_1: {
      const uint8_t* b = row + (j / 32) * 20;
      const int i = static_cast<int>(j % 32);
      const int q = i < 16 ? (b[4 + i] & 0x0f) : (b[4 + i - 16] >> 4);
      return half_bits_to_float(load_u16(b)) * static_cast<float>(q) +
             half_bits_to_float(load_u16(b + 2));
    }
    default:
      return 0.0f;
  }
}

// Offset (in elements) of the n-th element, in row-major order, of a strided view.
__device__ __forceinline__ int64_t view_offset(const StridedView& v, int64_t n) {
  int64_t off = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    const int64_t i = n % v.shape[d];
    n /= v.shape[d];
    off += i * v.strides[d];
  }
  return off;
}

}  // namespace tandem::cuda::k
