// SPDX-License-Identifier: Apache-2.0
// f32 GEMM: provider choice and tandem's own blocked kernel. The own kernel follows the usual
// three-level blocking: C is cut into kMc x kNc tiles (one OpenMP work item each); per tile and per
// kKc slice of K, A and B are packed into gemm_mr-row / gemm_nr-column panels (zero-padded), and
// the ISA micro-kernel computes gemm_mr x gemm_nr blocks of C from them.
#include "gemm_f32.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "blas_adapter.h"
#include "isa.h"
#include "kernels/dnnl_adapter.h"
#include "kernels/parallel.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem::cpu {
namespace {

GemmProvider pick_provider() {
  const char* env = std::getenv("TANDEM_CPU_GEMM");
  const std::string want = env ? env : "";
  GemmProvider p = onednn::available()     ? GemmProvider::kOneDnn
                   : openblas::available() ? GemmProvider::kOpenBlas
                                           : GemmProvider::kOwn;
  if (want == "onednn" && onednn::available()) p = GemmProvider::kOneDnn;
  if (want == "openblas" && openblas::available()) p = GemmProvider::kOpenBlas;
  if (want == "own") p = GemmProvider::kOwn;
  if (!want.empty() && want != gemm_provider_name(p))
    log().warn("TANDEM_CPU_GEMM={} is not available; using {}", want, gemm_provider_name(p));
  return p;
}

constexpr int64_t kKc = 256;  // K slice: a packed B panel column (kKc x gemm_nr) stays in L1

}  // namespace

GemmProvider gemm_provider() {
  static const GemmProvider p = pick_provider();
  return p;
}

const char* gemm_provider_name(GemmProvider p) {
  switch (p) {
    case GemmProvider::kOneDnn:
      return "onednn";
    case GemmProvider::kOpenBlas:
      return "openblas";
    case GemmProvider::kOwn:
      return "own";
  }
  return "?";
}

void own_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
               int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  const IsaKernels& isa_k = isa();
  const int64_t mr = isa_k.gemm_mr, nr = isa_k.gemm_nr;
  const int64_t mc = mr * std::max<int64_t>(1, 144 / mr);  // A panel block: mc x kKc (~144 KiB)
  const int64_t nc = nr * std::max<int64_t>(1, 256 / nr);  // B panel block: kKc x nc (~256 KiB)
  const int64_t mt = (m + mc - 1) / mc, nt = (n + nc - 1) / nc, tiles = mt * nt;
  // A(i, l) and B(l, j) of the untransposed product.
  const int64_t a_rs = ta ? 1 : lda, a_cs = ta ? lda : 1, b_rs = tb ? 1 : ldb, b_cs = tb ? ldb : 1;
  const int team = team_size(tiles, threads);
  std::vector<std::vector<float>> apacks(team), bpacks(team);
  parallel_for(tiles, threads, [&](int64_t t, int th) {
    std::vector<float>& apack = apacks[th];
    std::vector<float>& bpack = bpacks[th];
    if (apack.empty()) {
      apack.resize(static_cast<size_t>(mc * kKc));
      bpack.resize(static_cast<size_t>(nc * kKc));
    }
    const int64_t i0 = (t / nt) * mc, j0 = (t % nt) * nc;
    const int64_t mb = std::min(mc, m - i0), nb = std::min(nc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kb = std::min(kKc, k - p0);
      // B panels: panel q holds columns [q*nr, q*nr + nr) of this tile, kb rows, nr values per row.
      for (int64_t q = 0; q * nr < nb; ++q) {
        float* dst = bpack.data() + q * kb * nr;
        const int64_t cols = std::min(nr, nb - q * nr);
        for (int64_t l = 0; l < kb; ++l) {
          const float* src = b + (p0 + l) * b_rs + (j0 + q * nr) * b_cs;
          for (int64_t jj = 0; jj < cols; ++jj) dst[l * nr + jj] = src[jj * b_cs];
          for (int64_t jj = cols; jj < nr; ++jj) dst[l * nr + jj] = 0.0f;
        }
      }
      // A panels: panel r holds rows [r*mr, r*mr + mr), kb steps, mr values per step.
      for (int64_t r = 0; r * mr < mb; ++r) {
        float* dst = apack.data() + r * kb * mr;
        const int64_t rows = std::min(mr, mb - r * mr);
        for (int64_t l = 0; l < kb; ++l) {
          const float* src = a + (i0 + r * mr) * a_rs + (p0 + l) * a_cs;
          for (int64_t ii = 0; ii < rows; ++ii) dst[l * mr + ii] = src[ii * a_rs];
          for (int64_t ii = rows; ii < mr; ++ii) dst[l * mr + ii] = 0.0f;
        }
      }
      const float beta_k = p0 == 0 ? beta : 1.0f;
      for (int64_t q = 0; q * nr < nb; ++q) {
        for (int64_t r = 0; r * mr < mb; ++r) {
          isa_k.sgemm_micro(kb, apack.data() + r * kb * mr, bpack.data() + q * kb * nr,
                            c + (i0 + r * mr) * ldc + j0 + q * nr, ldc,
                            static_cast<int>(std::min(mr, mb - r * mr)),
                            static_cast<int>(std::min(nr, nb - q * nr)), alpha, beta_k);
        }
      }
    }
  });
}

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
           int threads) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    own_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
    return;
  }
  // Small products run on the calling thread whatever the provider (parallel.h).
  threads = parallel_threads(m * n * k, 4 * (m * k + k * n + m * n), threads);
  switch (gemm_provider()) {
    case GemmProvider::kOneDnn:
      onednn::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
      return;
    case GemmProvider::kOpenBlas:
      openblas::sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
      return;
    case GemmProvider::kOwn:
      own_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, threads);
      return;
  }
}

}  // namespace tandem::cpu
