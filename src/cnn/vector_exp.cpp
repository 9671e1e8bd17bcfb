// SPDX-License-Identifier: Apache-2.0
// SiLU in place (vector_exp.h).
#include "cnn/vector_exp.h"
#include "kernels/cpu_info.h"
#include "kernels/parallel.h"

#include <algorithm>
#include <cmath>

// GCC 12 warns about the undefined first operand inside the AVX-512 intrinsics (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::cnn::kernels {

namespace {

#if defined(__x86_64__)
__attribute__((target("avx512f,fma"))) void silu_avx512(float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, y + i)));
  }
}
#endif

}  // namespace

void silu_inplace(float* y, int64_t n, int threads) {
#if defined(__x86_64__)
  static const bool avx512 = cpu::cpu_info().avx512f && cpu::cpu_info().fma;
#else
  constexpr bool avx512 = false;
#endif
  constexpr int64_t kChunk = 16 * 1024;  // floats per work item
  const int64_t items = (n + kChunk - 1) / kChunk;
  cpu::parallel_for_static(items, std::max(1, threads), [&](int64_t it, int) {
    float* p = y + it * kChunk;
    const int64_t m = std::min(kChunk, n - it * kChunk);
#if defined(__x86_64__)
    if (avx512) {
      silu_avx512(p, m);
      return;
    }
#endif
    for (int64_t i = 0; i < m; ++i) p[i] = p[i] / (1.0f + std::exp(-p[i]));
  });
}

}  // namespace tandem::cnn::kernels
