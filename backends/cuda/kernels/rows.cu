// SPDX-License-Identifier: Apache-2.0
// Row-wise kernels (one block per row, rows in a grid-stride loop): softmax, RMSNorm, LayerNorm;
// and RoPE.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

constexpr int kRowThreads = 256;

// As the CPU reference: x - max, exp, divide by the sum (a row of only -inf gives NaN there too).
__global__ void __launch_bounds__(kRowThreads)
    softmax_kernel(const float* x, float* y, int64_t rows, int64_t cols) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, xr[j]);
    m = block_max(m, scratch);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(xr[j] - m);
    const float inv = 1.0f / block_sum(sum, scratch);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = expf(xr[j] - m) * inv;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    rms_norm_kernel(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                    float eps) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) ss += xr[j] * xr[j];
    ss = block_sum(ss, scratch);
    const float inv = rsqrtf(ss / static_cast<float>(cols) + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) yr[j] = xr[j] * inv * w[j];
  }
}

__global__ void __launch_bounds__(kRowThreads)
    layer_norm_kernel(const float* x, const float* w, const float* b, float* y, int64_t rows,
                      int64_t cols, float eps) {
  __shared__ float scratch[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) s += xr[j];
    const float mean = block_sum(s, scratch) / static_cast<float>(cols);
    float v = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      const float d = xr[j] - mean;
      v += d * d;
    }
    const float inv = rsqrtf(block_sum(v, scratch) / static_cast<float>(cols) + eps);
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
      yr[j] = (xr[j] - mean) * inv * w[j] + (b ? b[j] : 0.0f);
  }
}

// Per (token, head): threads [0, rd/2) rotate one pair each; threads [rd/2, rd/2 + dim - rd) copy
// the non-rotating tail. Angles are computed in double: positions reach 1e5+ where float angles
// lose digits.
__global__ void rope_kernel(const float* x, const int32_t* pos, float* y, int64_t tokens,
                            int64_t heads, int64_t dim, int64_t rd, float theta, bool neox) {
  const int64_t half = rd / 2, per_row = half + (dim - rd), n = tokens * heads * per_row;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t row = i / per_row, p = i - row * per_row;
    const float* xr = x + row * dim;
    float* yr = y + row * dim;
    if (p >= half) {
      const int64_t e = rd + (p - half);
      yr[e] = xr[e];
      continue;
    }
    const int64_t t = row / heads;
    const double inv_freq =
        pow(static_cast<double>(theta), -2.0 * static_cast<double>(p) / static_cast<double>(rd));
    double sn, cs;
    sincos(static_cast<double>(pos[t]) * inv_freq, &sn, &cs);
    const int64_t i0 = neox ? p : 2 * p, i1 = neox ? p + half : 2 * p + 1;
    const float x0 = xr[i0], x1 = xr[i1];
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    yr[i0] = x0 * c - x1 * s;
    yr[i1] = x0 * s + x1 * c;
  }
}

unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(rows < kMaxBlocks ? rows : kMaxBlocks);
}

}  // namespace

cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  softmax_kernel<<<row_grid(rows), kRowThreads, 0, s>>>(x, y, rows, cols);
  return cudaGetLastError();
}

cudaError_t rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  rms_norm_kernel<<<row_grid(rows), kRowThreads, 0, s>>>(x, w, y, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                       int64_t cols, float eps, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  layer_norm_kernel<<<row_grid(rows), kRowThreads, 0, s>>>(x, w, b, y, rows, cols, eps);
  return cudaGetLastError();
}

cudaError_t rope(const float* x, const int32_t* pos, float* y, int64_t tokens, int64_t heads,
                 int64_t dim, int64_t rotary_dim, float theta, bool neox, cudaStream_t s) {
  const int64_t n = tokens * heads * (rotary_dim / 2 + (dim - rotary_dim));
  if (n == 0) return cudaSuccess;
  rope_kernel<<<grid_for(n), kThreads, 0, s>>>(x, pos, y, tokens, heads, dim, rotary_dim, theta,
                                               neox);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
