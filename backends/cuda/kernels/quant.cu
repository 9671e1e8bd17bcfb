// SPDX-License-Identifier: Apache-2.0
// Weight decoding: dequantize rows to f32 (scratch for cuBLAS), the fused dequantize-GEMV used for
// small-M GEMM (decode steps), and the embedding gather from any weight dtype.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

__host__ __device__ constexpr int64_t row_bytes(DType t, int64_t cols) {
  return cols / dtype_block_size(t) * dtype_block_bytes(t);
}

__global__ void dequantize_rows_kernel(DType t, const uint8_t* src, float* dst, int64_t rows,
                                       int64_t cols) {
  const int64_t rb = row_bytes(t, cols), n = rows * cols;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t r = i / cols;
    dst[i] = load_weight(t, src + r * rb, i - r * cols);
  }
}

// Decodes the 32 values of GGUF block `b` of type T.
template <DType T>
__device__ __forceinline__ void decode_block(const uint8_t* b, float* w) {
  if constexpr (T == DType::kQ8_0) {
    const float d = half_bits_to_float(load_u16(b));
#pragma unroll
    for (int i = 0; i < 32; ++i) w[i] = d * static_cast<float>(static_cast<int8_t>(b[2 + i]));
  } else if constexpr (T == DType::kQ4_0) {
    const float d = half_bits_to_float(load_u16(b));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = d * static_cast<float>((b[2 + i] & 0x0f) - 8);
      w[i + 16] = d * static_cast<float>((b[2 + i] >> 4) - 8);
    }
  } else {  // kQ4_1
    const float d = half_bits_to_float(load_u16(b)), m = half_bits_to_float(load_u16(b + 2));
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      w[i] = d * static_cast<float>(b[4 + i] & 0x0f) + m;
      w[i + 16] = d * static_cast<float>(b[4 + i] >> 4) + m;
    }
  }
}

constexpr int kGemvWarps = 4;

// One warp per output column j (a row of w): lanes stride over K (element-wise for f16/bf16,
// block-wise for the GGUF types), keep up to kGemvMaxRows partial sums, then reduce across the
// warp.
template <DType T>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const float* a, int64_t sam, int64_t sak, const uint8_t* w, float* c, int m,
                int64_t n, int64_t k, float alpha, float beta) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rb = row_bytes(T, k);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp; j < n;
       j += static_cast<int64_t>(gridDim.x) * kGemvWarps) {
    const uint8_t* wr = w + j * rb;
    float acc[kGemvMaxRows];
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) acc[i] = 0.0f;
    if constexpr (T == DType::kF16 || T == DType::kBF16) {
      for (int64_t kk = lane; kk < k; kk += 32) {
        const uint16_t bits = load_u16(wr + 2 * kk);
        const float wv = T == DType::kF16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
#pragma unroll
        for (int i = 0; i < kGemvMaxRows; ++i)
          if (i < m) acc[i] += wv * a[i * sam + kk * sak];
      }
    } else {
      constexpr int64_t kBlockBytes = dtype_block_bytes(T);
      const int64_t blocks = k / 32;
      for (int64_t b = lane; b < blocks; b += 32) {
        float wv[32];
        decode_block<T>(wr + b * kBlockBytes, wv);
#pragma unroll
        for (int i = 0; i < kGemvMaxRows; ++i) {
          if (i < m) {
            const float* ar = a + i * sam + b * 32 * sak;
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < 32; ++e) s += wv[e] * ar[e * sak];
            acc[i] += s;
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kGemvMaxRows; ++i) {
      if (i < m) {
        const float s = warp_sum(acc[i]);
        if (lane == 0) {
          float* out = c + i * n + j;
          *out = beta == 0.0f ? alpha * s : alpha * s + beta * *out;
        }
      }
    }
  }
}

__global__ void embedding_kernel(DType t, const uint8_t* table, const int32_t* ids, float* out,
                                 int64_t tokens, int64_t vocab, int64_t dim) {
  const int64_t rb = row_bytes(t, dim), n = tokens * dim;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t tok = i / dim;
    int64_t id = ids[tok];
    id = id < 0 ? 0 : (id >= vocab ? vocab - 1 : id);
    out[i] = load_weight(t, table + id * rb, i - tok * dim);
  }
}

}  // namespace

cudaError_t dequantize_rows(DType t, const void* src, float* dst, int64_t rows, int64_t cols,
                            cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  dequantize_rows_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(
      t, static_cast<const uint8_t*>(src), dst, rows, cols);
  return cudaGetLastError();
}

cudaError_t gemv_weights(DType t, const float* a, int64_t a_stride_m, int64_t a_stride_k,
                         const void* w, float* c, int m, int64_t n, int64_t k, float alpha,
                         float beta, cudaStream_t s) {
  if (m <= 0 || n == 0) return cudaSuccess;
  if (m > kGemvMaxRows) return cudaErrorInvalidValue;
  const unsigned grid = grid_for(n, kGemvWarps);
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (t) {
    case DType::kF16:
      gemv_kernel<DType::kF16>
          <<<grid, kGemvWarps * 32, 0, s>>>(a, a_stride_m, a_stride_k, wb, c, m, n, k, alpha, beta);
      break;
    case DType::kBF16:
      gemv_kernel<DType::kBF16>
          <<<grid, kGemvWarps * 32, 0, s>>>(a, a_stride_m, a_stride_k, wb, c, m, n, k, alpha, beta);
      break;
    case DType::kQ8_0:
      gemv_kernel<DType::kQ8_0>
          <<<grid, kGemvWarps * 32, 0, s>>>(a, a_stride_m, a_stride_k, wb, c, m, n, k, alpha, beta);
      break;
    case DType::kQ4_0:
      gemv_kernel<DType::kQ4_0>
          <<<grid, kGemvWarps * 32, 0, s>>>(a, a_stride_m, a_stride_k, wb, c, m, n, k, alpha, beta);
      break;
    case DType::kQ4_1:
      gemv_kernel<DType::kQ4_1>
          <<<grid, kGemvWarps * 32, 0, s>>>(a, a_stride_m, a_stride_k, wb, c, m, n, k, alpha, beta);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t embedding(DType t, const void* table, const int32_t* ids, float* out, int64_t tokens,
                      int64_t vocab, int64_t dim, cudaStream_t s) {
  if (tokens * dim == 0) return cudaSuccess;
  embedding_kernel<<<grid_for(tokens * dim), kThreads, 0, s>>>(
      t, static_cast<const uint8_t*>(table), ids, out, tokens, vocab, dim);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
