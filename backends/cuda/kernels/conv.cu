// SPDX-License-Identifier: Apache-2.0
// im2col for convolution as GEMM (cuBLAS does the multiply; see cuda_ops_blas.cpp).
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

__global__ void im2col_kernel(const float* x, float* col, Im2colArgs a) {
  const int64_t plane = a.out_h * a.out_w, n = a.channels * a.kh * a.kw * plane;
  for (int64_t idx = global_thread(); idx < n; idx += grid_threads()) {
    const int64_t p = idx % plane, r = idx / plane;  // r = (c * kh + i) * kw + j
    const int64_t ox = p % a.out_w, oy = p / a.out_w;
    const int64_t j = r % a.kw, i = (r / a.kw) % a.kh, c = r / (a.kw * a.kh);
    const int64_t iy = oy * a.stride_h - a.pad_top + i * a.dilation_h;
    const int64_t ix = ox * a.stride_w - a.pad_left + j * a.dilation_w;
    const bool inside = iy >= 0 && iy < a.height && ix >= 0 && ix < a.width;
    col[idx] = inside ? x[(c * a.height + iy) * a.width + ix] : 0.0f;
  }
}

}  // namespace

cudaError_t im2col(const float* x, float* col, const Im2colArgs& a, cudaStream_t s) {
  const int64_t n = a.channels * a.kh * a.kw * a.out_h * a.out_w;
  if (n == 0) return cudaSuccess;
  im2col_kernel<<<grid_for(n), kThreads, 0, s>>>(x, col, a);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
