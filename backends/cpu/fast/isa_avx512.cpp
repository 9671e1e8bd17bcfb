// SPDX-License-Identifier: Apache-2.0
// The AVX-512 (F + BW, with FMA and F16C) instance of the generic kernels in isa_kernels.inc. Only
// this region is compiled for AVX-512; isa() selects it when cpu_info() reports avx512f and
// avx512bw.
#include "isa.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/dequant.h"
#include "tandem/core/error.h"

// GCC 12 reports false "may be used uninitialized" warnings inside its AVX-512 intrinsic headers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)  // clang has no "#pragma GCC target"; its attribute pragma does the same
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#endif
namespace tandem::cpu::avx512 {
constexpr const char* kIsaName = "avx512";
#include "kernels/simd_avx512.h"
// The generic kernels below use the V just defined.
#include "isa_kernels.inc"
}  // namespace tandem::cpu::avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

#else
namespace tandem::cpu::avx512 {
const IsaKernels* table() { return nullptr; }
}  // namespace tandem::cpu::avx512
#endif
