// SPDX-License-Identifier: Apache-2.0
// CUDA kernels of the CNN runner (cnn_runner.cpp) for what cuDNN/cuBLAS do not cover with the
// engine's exact semantics: the conv epilogue (bias, residual, any activation), explicit
// asymmetric padding, pools with ceil mode and either count_include_pad, global average pool,
// elementwise add/mul/affine/activation, nearest resize and row softmax. NCHW f32, launched on
// the given stream; each returns the launch status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace tandem::cuda::cnnk {

// Activation codes: the order of tandem::cnn::ActKind (none, relu, leaky relu, clip, sigmoid,
// silu); alpha/beta as in cnn::Activation.
struct Act {
  int kind = 0;
  float alpha = 0.0f, beta = 0.0f;
};

// y[i] = act(y[i] + bias[c] + res[i]) over [n, c, plane]; bias and res may be null.
cudaError_t epilogue(float* y, const float* bias, const float* res, int64_t n, int64_t c,
                     int64_t plane, Act act, cudaStream_t s);
// y [n*c, h + pt + pb, w + pl + pr] = x [n*c, h, w] surrounded by zeros.
cudaError_t pad(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int pt, int pl,
                int64_t oh, int64_t ow, cudaStream_t s);
struct PoolGeom {
  int64_t planes, h, w, oh, ow;
  int kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  bool max, count_include_pad;
};
cudaError_t pool(const float* x, float* y, const PoolGeom& g, cudaStream_t s);
cudaError_t global_average(const float* x, float* y, int64_t planes, int64_t plane, cudaStream_t s);
// y = a op b: b_mode 0 same shape, 1 scalar, 2 per channel (channels, inner per channel).
cudaError_t binary(const float* a, const float* b, float* y, int64_t e, int b_mode,
                   int64_t channels, int64_t inner, bool add, cudaStream_t s);
cudaError_t affine(const float* x, float* y, const float* scale, const float* shift, int64_t e,
                   int64_t channels, int64_t inner, cudaStream_t s);
cudaError_t activation(const float* x, float* y, int64_t e, Act act, cudaStream_t s);
cudaError_t resize_nearest(const float* x, float* y, int64_t planes, int64_t h, int64_t w,
                           int64_t oh, int64_t ow, int scale_h, int scale_w, cudaStream_t s);
cudaError_t softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s);

}  // namespace tandem::cuda::cnnk
