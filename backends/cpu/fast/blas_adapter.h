// SPDX-License-Identifier: Apache-2.0
// The only door to OpenBLAS (cblas_sgemm), the portable GEMM fallback. Built only with
// TANDEM_HAVE_OPENBLAS; otherwise available() is false and sgemm throws Unsupported. OpenBLAS's own
// pthread pool is set to `threads` per call (1 from inside OpenMP regions, as its docs require).
#pragma once

#include <cstdint>

namespace tandem::cpu::openblas {

bool available();

// Row-major: C = alpha * op(A) op(B) + beta * C.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads);

}  // namespace tandem::cpu::openblas
