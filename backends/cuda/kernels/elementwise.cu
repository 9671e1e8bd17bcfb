// SPDX-License-Identifier: Apache-2.0
// Elementwise kernels: activations, binary ops with trailing-shape broadcast, per-channel bias.
#include "common.cuh"

namespace tandem::cuda::k {
namespace {

template <ops::UnaryOp Op>
__device__ __forceinline__ float apply_unary(float x) {
  if constexpr (Op == ops::UnaryOp::kSilu) {
    return x / (1.0f + expf(-x));
  } else if constexpr (Op == ops::UnaryOp::kGelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  } else if constexpr (Op == ops::UnaryOp::kGeluErf) {
    return 0.5f * x * (1.0f + erff(x * 0.7071067811865476f));
  } else if constexpr (Op == ops::UnaryOp::kRelu) {
    return x > 0.0f ? x : 0.0f;
  } else {
    return expf(x);
  }
}

template <ops::UnaryOp Op>
__global__ void unary_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) y[i] = apply_unary<Op>(x[i]);
}

template <ops::BinaryOp Op>
__global__ void binary_kernel(const float* a, const float* b, float* y, int64_t n, int64_t nb) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const float l = a[i], r = b[nb == 1 ? 0 : i % nb];
    if constexpr (Op == ops::BinaryOp::kAdd) {
      y[i] = l + r;
    } else if constexpr (Op == ops::BinaryOp::kMul) {
      y[i] = l * r;
    } else {
      y[i] = l - r;
    }
  }
}

__global__ void channel_bias_kernel(float* y, const float* bias, int64_t images, int64_t channels,
                                    int64_t plane) {
  const int64_t n = images * channels * plane;
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    y[i] += bias[(i / plane) % channels];
}

}  // namespace

cudaError_t unary(ops::UnaryOp op, const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = grid_for(n);
  switch (op) {
    case ops::UnaryOp::kSilu:
      unary_kernel<ops::UnaryOp::kSilu><<<g, kThreads, 0, s>>>(x, y, n);
      break;
    case ops::UnaryOp::kGelu:
      unary_kernel<ops::UnaryOp::kGelu><<<g, kThreads, 0, s>>>(x, y, n);
      break;
    case ops::UnaryOp::kGeluErf:
      unary_kernel<ops::UnaryOp::kGeluErf><<<g, kThreads, 0, s>>>(x, y, n);
      break;
    case ops::UnaryOp::kRelu:
      unary_kernel<ops::UnaryOp::kRelu><<<g, kThreads, 0, s>>>(x, y, n);
      break;
    case ops::UnaryOp::kExp:
      unary_kernel<ops::UnaryOp::kExp><<<g, kThreads, 0, s>>>(x, y, n);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t binary(ops::BinaryOp op, const float* a, const float* b, float* y, int64_t n,
                   int64_t nb, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (nb <= 0) return cudaErrorInvalidValue;
  const unsigned g = grid_for(n);
  switch (op) {
    case ops::BinaryOp::kAdd:
      binary_kernel<ops::BinaryOp::kAdd><<<g, kThreads, 0, s>>>(a, b, y, n, nb);
      break;
    case ops::BinaryOp::kMul:
      binary_kernel<ops::BinaryOp::kMul><<<g, kThreads, 0, s>>>(a, b, y, n, nb);
      break;
    case ops::BinaryOp::kSub:
      binary_kernel<ops::BinaryOp::kSub><<<g, kThreads, 0, s>>>(a, b, y, n, nb);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t add_channel_bias(float* y, const float* bias, int64_t images, int64_t channels,
                             int64_t plane, cudaStream_t s) {
  const int64_t n = images * channels * plane;
  if (n == 0) return cudaSuccess;
  channel_bias_kernel<<<grid_for(n), kThreads, 0, s>>>(y, bias, images, channels, plane);
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
