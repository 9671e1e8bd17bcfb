// SPDX-License-Identifier: Apache-2.0
#include "blas_adapter.h"

#include "tandem/core/error.h"

#if defined(TANDEM_HAVE_OPENBLAS)
#include <cblas.h>
#include <omp.h>
#endif

namespace tandem::cpu::openblas {

#if defined(TANDEM_HAVE_OPENBLAS)

bool available() { return true; }

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads) {
  // OpenBLAS (pthreads build) must not start its own threads from inside an OpenMP region.
  const int want = omp_in_parallel() ? 1 : threads;
  if (openblas_get_num_threads() != want) openblas_set_num_threads(want);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

#else

bool available() { return false; }

void sgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
           int64_t, float, float*, int64_t, int) {
  throw Unsupported("OpenBLAS sgemm: tandem was built without OpenBLAS (libopenblas-dev)");
}

#endif

}  // namespace tandem::cpu::openblas
