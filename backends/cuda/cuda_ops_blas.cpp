// SPDX-License-Identifier: Apache-2.0
// GEMM, batched GEMM and conv2d on cuBLAS.
//
// Row-major data meets column-major cuBLAS through the transposition identity: a row-major C[m, n]
// is the column-major C^T[n, m], and C^T = op(B)^T op(A)^T, so cuBLAS is called with the operands
// swapped (B first), the dimensions (n, m, k) and each operand's stored row length as its leading
// dimension. Non-f32 weights (f16, bf16, q8_0, q4_0, q4_1, stored [N, K]) take the fused
// dequantize-GEMV kernel when M <= 8 (decode steps; with int8_activations and q8_0/q4_0/q4_1
// weights, the int8-activation GEMV, which rounds A to int8 blocks and uses __dp4a), else they are
// dequantized to f32 in chunks of at most kScratchFloats into a scratch buffer, each chunk
// multiplied with cuBLAS into its columns of C. conv2d is im2col (skipped for
// 1x1/stride-1/no-padding kernels) + one strided-batched GEMM over groups per image, then a
// per-channel bias.
#include <algorithm>

#include "cuda_ops.h"
#include "tandem/core/error.h"

namespace tandem::cuda {
namespace {

constexpr int64_t kScratchFloats = int64_t{16} << 20;  // 64 MiB of dequantized weights per chunk

int64_t ld(int64_t v) { return std::max<int64_t>(1, v); }  // cuBLAS wants leading dimensions >= 1

}  // namespace

void sgemm_rm(OpScope& sc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
              int64_t ldc) {
  CudaStream& st = sc.cuda_stream();
  std::lock_guard lk(st.cublas_mutex());
  TANDEM_CUBLAS_CHECK(cublasSgemm_64(st.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                     trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                     ld(ldb), a, ld(lda), &beta, c, ld(ldc)));
}

void sgemm_batched_rm(OpScope& sc, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      float alpha, const float* a, int64_t lda, int64_t stride_a, const float* b,
                      int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                      int64_t stride_c, int64_t batch) {
  CudaStream& st = sc.cuda_stream();
  std::lock_guard lk(st.cublas_mutex());
  TANDEM_CUBLAS_CHECK(cublasSgemmStridedBatched_64(
      st.cublas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m,
      k, &alpha, b, ld(ldb), stride_b, a, ld(lda), stride_a, &beta, c, ld(ldc), stride_c, batch));
}

void run_gemm(CudaBackend& backend, const Tensor& a, const Tensor& b, Tensor& c,
              const ops::GemmParams& p, Stream* s) {
  OpScope sc(backend, c, s, "gemm");
  const int64_t m = c.size(0), n = c.size(1), k = p.trans_a ? a.size(0) : a.size(1);
  const int64_t lda = p.trans_a ? m : k;
  if (m > 0 && n > 0) {
    if (b.dtype() == DType::kF32) {
      sgemm_rm(sc, p.trans_a, p.trans_b, m, n, k, p.alpha, ptr<float>(a), lda, ptr<float>(b),
               p.trans_b ? k : n, p.beta, ptr<float>(c), n);
    } else if (m <= k::kGemvMaxRows && p.int8_activations && p.trans_b && k % 32 == 0 &&
               (b.dtype() == DType::kQ8_0 || b.dtype() == DType::kQ4_0 ||
                b.dtype() == DType::kQ4_1)) {
      const int64_t stride_m = p.trans_a ? 1 : k, stride_k = p.trans_a ? m : 1;
      const auto bytes = static_cast<int64_t>(k::gemv_int8_scratch_bytes(static_cast<int>(m), k));
      Tensor scratch = sc.scratch(Shape{bytes}, DType::kU8);
      TANDEM_CUDA_CHECK(k::gemv_int8(b.dtype(), ptr<float>(a), stride_m, stride_k, b.raw_data(),
                                     ptr<float>(c), static_cast<int>(m), n, k, p.alpha, p.beta,
                                     scratch.raw_data(), sc.stream()));
    } else if (m <= k::kGemvMaxRows) {
      // a(i, kk) = a[i * lda + kk] untransposed, a[kk * m + i] transposed.
      const int64_t stride_m = p.trans_a ? 1 : k, stride_k = p.trans_a ? m : 1;
      TANDEM_CUDA_CHECK(k::gemv_weights(b.dtype(), ptr<float>(a), stride_m, stride_k, b.raw_data(),
                                        ptr<float>(c), static_cast<int>(m), n, k, p.alpha, p.beta,
                                        sc.stream()));
    } else {
      const int64_t chunk = k == 0 ? n : std::clamp<int64_t>(kScratchFloats / k, 1, n);
      Tensor w = sc.scratch(Shape{chunk, k}, DType::kF32);
      const int64_t row_bytes = dtype_row_bytes(b.dtype(), k);
      const auto* wb = static_cast<const uint8_t*>(b.raw_data());
      for (int64_t n0 = 0; n0 < n; n0 += chunk) {
        const int64_t nn = std::min(chunk, n - n0);
        TANDEM_CUDA_CHECK(
            k::dequantize_rows(b.dtype(), wb + n0 * row_bytes, ptr<float>(w), nn, k, sc.stream()));
        sgemm_rm(sc, p.trans_a, true, m, nn, k, p.alpha, ptr<float>(a), lda, ptr<float>(w), k,
                 p.beta, ptr<float>(c) + n0, n);
      }
    }
  }
  sc.finish({a, b, c});
}

void run_batched_gemm(CudaBackend& backend, const Tensor& a, const Tensor& b, Tensor& c,
                      const ops::GemmParams& p, Stream* s) {
  OpScope sc(backend, c, s, "batched_gemm");
  const int64_t batch = c.size(0), m = c.size(1), n = c.size(2),
                k = p.trans_a ? a.size(1) : a.size(2);
  if (batch > 0 && m > 0 && n > 0) {
    sgemm_batched_rm(sc, p.trans_a, p.trans_b, m, n, k, p.alpha, ptr<float>(a), p.trans_a ? m : k,
                     m * k, ptr<float>(b), p.trans_b ? k : n, k * n, p.beta, ptr<float>(c), n,
                     m * n, batch);
  }
  sc.finish({a, b, c});
}

void run_conv2d(CudaBackend& backend, const Tensor& x, const Tensor& w, const Tensor& bias,
                Tensor& y, const ops::Conv2dParams& p, Stream* s) {
  OpScope sc(backend, y, s, "conv2d");
  const int64_t images = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t cout = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t out_h = y.size(2), out_w = y.size(3), plane = out_h * out_w, groups = p.groups;
  const int64_t cout_g = cout / groups, kc = cg * kh * kw;
  const bool direct = kh == 1 && kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
                      p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0;
  if (y.numel() > 0) {
    Tensor col;
    if (!direct && kc > 0) col = sc.scratch(Shape{groups * kc, plane}, DType::kF32);
    k::Im2colArgs ia;
    ia.channels = channels;
    ia.height = height;
    ia.width = width;
    ia.kh = kh;
    ia.kw = kw;
    ia.out_h = out_h;
    ia.out_w = out_w;
    ia.stride_h = p.stride_h;
    ia.stride_w = p.stride_w;
    ia.pad_top = p.pad_top;
    ia.pad_left = p.pad_left;
    ia.dilation_h = p.dilation_h;
    ia.dilation_w = p.dilation_w;
    for (int64_t img = 0; img < images; ++img) {
      const float* xi = ptr<float>(x) + img * channels * height * width;
      float* yi = ptr<float>(y) + img * cout * plane;
      const float* cols = xi;
      if (!direct && kc > 0) {
        TANDEM_CUDA_CHECK(k::im2col(xi, ptr<float>(col), ia, sc.stream()));
        cols = ptr<float>(col);
      }
      // Per group g: Y_g[cout_g, plane] = W_g[cout_g, kc] * col_g[kc, plane].
      sgemm_batched_rm(sc, false, false, cout_g, plane, kc, 1.0f, ptr<float>(w), kc, cout_g * kc,
                       cols, plane, kc * plane, 0.0f, yi, plane, cout_g * plane, groups);
    }
    if (bias.defined()) {
      const Tensor bc = sc.contiguous(bias);
      TANDEM_CUDA_CHECK(
          k::add_channel_bias(ptr<float>(y), ptr<float>(bc), images, cout, plane, sc.stream()));
    }
  }
  sc.finish({x, w, bias, y});
}

}  // namespace tandem::cuda
