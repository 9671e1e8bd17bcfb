// SPDX-License-Identifier: Apache-2.0
// Row-major f32 GEMM for the fast kernels, from the best provider built in: oneDNN (dnnl_sgemm),
// else OpenBLAS (cblas_sgemm), else tandem's own blocked kernel (packing + the ISA micro-kernel of
// isa.h). TANDEM_CPU_GEMM=onednn|openblas|own picks one explicitly (if built in); tests use it to
// check each. The provider also decides conv2d: oneDNN's convolution primitive, or im2col + this
// GEMM.
//
//   // C[m, n] = alpha * A[m, k] * B[n, k]^T + beta * C, on all CPU threads
//   tandem::cpu::sgemm(false, true, m, n, k, 1.0f, a, k, b, k, 0.0f, c, n,
//   tandem::cpu_num_threads());
//
// Thread-safety: all functions may be called concurrently. `threads` is how many OpenMP threads the
// call may use; pass 1 from inside a parallel region.
#pragma once

#include <cstdint>

namespace tandem::cpu {

enum class GemmProvider { kOneDnn, kOpenBlas, kOwn };

GemmProvider gemm_provider();
const char* gemm_provider_name(GemmProvider p);

// C = alpha * op(A) op(B) + beta * C; op(A) is m x k (A stored k x m when ta), op(B) k x n (B
// stored n x k when tb). beta == 0 never reads C.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads);

// tandem's own blocked GEMM (always available; the fallback when no library is built in).
void own_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
               int threads);

}  // namespace tandem::cpu
