// SPDX-License-Identifier: Apache-2.0
// The CNN runner's own CUDA kernels (cnn_kernels.h): grid-stride loops, one thread per output
// element (per row for softmax, per plane for the global average), the CPU engine's formulas.
#include <cuda_runtime.h>

#include "cnn_kernels.h"

namespace tandem::cuda::cnnk {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t work) {
  int64_t b = (work + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 65535) b = 65535;
  return static_cast<unsigned>(b);
}

__device__ __forceinline__ int64_t first() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t step() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float apply(float v, Act a) {
  switch (a.kind) {
    case 1:
      return v > 0.0f ? v : 0.0f;
    case 2:
      return v > 0.0f ? v : v * a.alpha;
    case 3:
      return fminf(fmaxf(v, a.alpha), a.beta);
    case 4:
      return 1.0f / (1.0f + expf(-v));
    case 5:
      return v / (1.0f + expf(-v));
    default:
      return v;
  }
}

__global__ void epilogue_k(float* y, const float* bias, const float* res, int64_t e, int64_t c,
                           int64_t plane, Act act) {
  for (int64_t i = first(); i < e; i += step()) {
    float v = y[i];
    if (bias) v += bias[(i / plane) % c];
    if (res) v += res[i];
    y[i] = apply(v, act);
  }
}

__global__ void pad_k(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int pt,
                      int pl, int64_t oh, int64_t ow) {
  const int64_t e = planes * oh * ow;
  for (int64_t i = first(); i < e; i += step()) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (ow * oh);
    const int64_t iy = oy - pt, ix = ox - pl;
    y[i] = iy >= 0 && iy < h && ix >= 0 && ix < w ? x[(p * h + iy) * w + ix] : 0.0f;
  }
}

__global__ void pool_k(const float* x, float* y, PoolGeom g) {
  const int64_t e = g.planes * g.oh * g.ow;
  for (int64_t i = first(); i < e; i += step()) {
    const int64_t ox = i % g.ow, oy = (i / g.ow) % g.oh, p = i / (g.ow * g.oh);
    const float* xp = x + p * g.h * g.w;
    float acc = g.max ? -INFINITY : 0.0f;
    int cnt = 0;
    for (int ky = 0; ky < g.kh; ++ky) {
      const int64_t iy = oy * g.sh - g.pt + static_cast<int64_t>(ky) * g.dh;
      const bool row = iy >= 0 && iy < g.h;
      for (int kx = 0; kx < g.kw; ++kx) {
        const int64_t ix = ox * g.sw - g.pl + static_cast<int64_t>(kx) * g.dw;
        if (row && ix >= 0 && ix < g.w) {
          const float v = xp[iy * g.w + ix];
          acc = g.max ? fmaxf(acc, v) : acc + v;
          ++cnt;
        } else if (g.count_include_pad && iy >= -g.pt && iy < g.h + g.pb && ix >= -g.pl &&
                   ix < g.w + g.pr) {
          ++cnt;
        }
      }
    }
    y[i] = g.max ? acc : (cnt > 0 ? acc / static_cast<float>(cnt) : 0.0f);
  }
}

__global__ void global_average_k(const float* x, float* y, int64_t planes, int64_t plane) {
  for (int64_t p = first(); p < planes; p += step()) {
    float acc = 0.0f;
    for (int64_t i = 0; i < plane; ++i) acc += x[p * plane + i];
    y[p] = acc / static_cast<float>(plane);
  }
}

__global__ void binary_k(const float* a, const float* b, float* y, int64_t e, int b_mode,
                         int64_t channels, int64_t inner, bool add) {
  for (int64_t i = first(); i < e; i += step()) {
    const float bv = b_mode == 0 ? b[i] : b_mode == 1 ? b[0] : b[(i / inner) % channels];
    y[i] = add ? a[i] + bv : a[i] * bv;
  }
}

__global__ void affine_k(const float* x, float* y, const float* scale, const float* shift,
                         int64_t e, int64_t channels, int64_t inner) {
  for (int64_t i = first(); i < e; i += step()) {
    const int64_t c = (i / inner) % channels;
    y[i] = x[i] * scale[c] + (shift ? shift[c] : 0.0f);
  }
}

__global__ void activation_k(const float* x, float* y, int64_t e, Act act) {
  for (int64_t i = first(); i < e; i += step()) y[i] = apply(x[i], act);
}

__global__ void resize_k(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int64_t oh,
                         int64_t ow, int scale_h, int scale_w) {
  const int64_t e = planes * oh * ow;
  for (int64_t i = first(); i < e; i += step()) {
    const int64_t ox = i % ow, oy = (i / ow) % oh, p = i / (ow * oh);
    y[i] = x[(p * h + oy / scale_h) * w + ox / scale_w];
  }
}

__global__ void softmax_k(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = first(); r < rows; r += step()) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j) m = fmaxf(m, xr[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) {
      yr[j] = expf(xr[j] - m);
      sum += yr[j];
    }
    for (int64_t j = 0; j < cols; ++j) yr[j] /= sum;
  }
}

}  // namespace

cudaError_t epilogue(float* y, const float* bias, const float* res, int64_t n, int64_t c,
                     int64_t plane, Act act, cudaStream_t s) {
  const int64_t e = n * c * plane;
  epilogue_k<<<blocks_for(e), kThreads, 0, s>>>(y, bias, res, e, c, plane, act);
  return cudaGetLastError();
}

cudaError_t pad(const float* x, float* y, int64_t planes, int64_t h, int64_t w, int pt, int pl,
                int64_t oh, int64_t ow, cudaStream_t s) {
  pad_k<<<blocks_for(planes * oh * ow), kThreads, 0, s>>>(x, y, planes, h, w, pt, pl, oh, ow);
  return cudaGetLastError();
}

cudaError_t pool(const float* x, float* y, const PoolGeom& g, cudaStream_t s) {
  pool_k<<<blocks_for(g.planes * g.oh * g.ow), kThreads, 0, s>>>(x, y, g);
  return cudaGetLastError();
}

cudaError_t global_average(const float* x, float* y, int64_t planes, int64_t plane,
                           cudaStream_t s) {
  global_average_k<<<blocks_for(planes), kThreads, 0, s>>>(x, y, planes, plane);
  return cudaGetLastError();
}

cudaError_t binary(const float* a, const float* b, float* y, int64_t e, int b_mode,
                   int64_t channels, int64_t inner, bool add, cudaStream_t s) {
  binary_k<<<blocks_for(e), kThreads, 0, s>>>(a, b, y, e, b_mode, channels, inner, add);
  return cudaGetLastError();
}

cudaError_t affine(const float* x, float* y, const float* scale, const float* shift, int64_t e,
                   int64_t channels, int64_t inner, cudaStream_t s) {
  affine_k<<<blocks_for(e), kThreads, 0, s>>>(x, y, scale, shift, e, channels, inner);
  return cudaGetLastError();
}

cudaError_t activation(const float* x, float* y, int64_t e, Act act, cudaStream_t s) {
  activation_k<<<blocks_for(e), kThreads, 0, s>>>(x, y, e, act);
  return cudaGetLastError();
}

cudaError_t resize_nearest(const float* x, float* y, int64_t planes, int64_t h, int64_t w,
                           int64_t oh, int64_t ow, int scale_h, int scale_w, cudaStream_t s) {
  resize_k<<<blocks_for(planes * oh * ow), kThreads, 0, s>>>(x, y, planes, h, w, oh, ow, scale_h,
                                                             scale_w);
  return cudaGetLastError();
}

cudaError_t softmax_rows(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s) {
  softmax_k<<<blocks_for(rows), kThreads, 0, s>>>(x, y, rows, cols);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::cnnk
