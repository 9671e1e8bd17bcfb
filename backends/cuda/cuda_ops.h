// SPDX-License-Identifier: Apache-2.0
// Shared plumbing of the CUDA op kernels (cuda_ops.cpp, cuda_ops_blas.cpp).
//
// OpScope resolves where an op runs: on the caller's CUDA stream (asynchronous; the op's tensors
// and scratch buffers stay alive until the queued work completes) or, for a null stream, on the
// device's internal stream followed by a wait (synchronous). It makes the output's device current
// for its lifetime.
//   OpScope sc(backend, y, s, "softmax");
//   TANDEM_CUDA_CHECK(k::softmax(x_ptr, y_ptr, rows, cols, sc.stream()));
//   sc.finish({x, y});
#pragma once

#include <span>
#include <vector>

#include "cuda_backend.h"
#include "cuda_check.h"
#include "kernels/kernels.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem::cuda {

class OpScope {
 public:
  OpScope(CudaBackend& backend, const Tensor& out, Stream* s, const char* op);
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

  cudaStream_t stream() const { return stream_->handle(); }
  CudaStream& cuda_stream() { return *stream_; }
  Device device() const { return device_; }
  bool async() const { return !sync_; }
  // A device buffer for this op only; released when the op's work has completed.
  Tensor scratch(const Shape& shape, DType dtype);
  // A contiguous version of t on the op's device (t itself when already contiguous), kept alive
  // with the op.
  Tensor contiguous(const Tensor& t);
  // Ends the op: retains `keep` (plus scratch) on the caller's stream, or waits for the internal
  // stream.
  void finish(std::vector<Tensor> keep);

 private:
  static int resolve(CudaBackend& backend, const Tensor& out, const char* op);
  Device device_;
  DeviceGuard guard_;
  CudaStream* stream_ = nullptr;
  bool sync_ = true;
  std::vector<Tensor> scratch_;
};

// Row-major C[m, n] (leading dimension ldc) = alpha * op(A) op(B) + beta * C with cuBLAS, on the
// scope's stream. lda / ldb are the row lengths of A and B as stored.
void sgemm_rm(OpScope& sc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc);
// The same for `batch` matrices at the given element strides.
void sgemm_batched_rm(OpScope& sc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                      int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                      int64_t stride_c, int64_t batch);

// The cuBLAS-backed ops (cuda_ops_blas.cpp).
void run_gemm(CudaBackend& backend, const Tensor& a, const Tensor& b, Tensor& c,
              const ops::GemmParams& p, Stream* s);
void run_batched_gemm(CudaBackend& backend, const Tensor& a, const Tensor& b, Tensor& c,
                      const ops::GemmParams& p, Stream* s);
void run_conv2d(CudaBackend& backend, const Tensor& x, const Tensor& w, const Tensor& bias,
                Tensor& y, const ops::Conv2dParams& p, Stream* s);
// Attention over a quantized paged KV cache (cuda_ops_kv_quant.cpp).
void run_quantized_paged_attention(CudaBackend& backend, const Tensor& q,
                                   std::span<const int32_t> q_positions,
                                   const ops::QuantPagedKv& kv, Tensor& out, float scale,
                                   Stream* s);

template <class T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace tandem::cuda
