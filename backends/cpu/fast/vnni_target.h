// SPDX-License-Identifier: Apache-2.0
// The AVX-512 VNNI function target of the int8 GEMV kernels (gemv_int8.cpp, gemv_int8_kquant.cpp),
// and the two helpers both use: only functions marked TANDEM_VNNI_TARGET are compiled for AVX-512
// F/BW/VL/VNNI (never -march), and gemv_int8_supported() checks the host before any of them runs.
// x86-64 only.
#pragma once

#include <cstdint>

#if defined(__x86_64__)
// GCC 12 reports -Wmaybe-uninitialized (and -Wuninitialized) inside avx512fintrin.h for intrinsics
// inlined into target-attribute functions (_mm512_max_ps, _mm512_reduce_*, _mm512_permutexvar_ps,
// the conversions...): the header passes _mm512_undefined_ps() and the like, a self-initialisation
// (`__m512 __Y = __Y;`) meaning "any value", as the pass-through operand of builtins called with
// an all-ones mask, which never read it. A false positive of the header, not of the kernels: it is
// silenced for the header's own lines only (GCC applies the diagnostic state at the warning's
// location, inside the header), so the kernels' code keeps the warning.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#define TANDEM_VNNI_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace tandem::cpu::fast {

// An f16 value (a block scale) as float.
TANDEM_VNNI_TARGET inline float f16_value(uint16_t h) { return _cvtsh_ss(h); }

// Prefetches [p, p + bytes) line by line into L1 (weight rows ahead of the one computed).
TANDEM_VNNI_TARGET inline void prefetch_range(const uint8_t* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + o), _MM_HINT_T0);
}

}  // namespace tandem::cpu::fast
#endif
