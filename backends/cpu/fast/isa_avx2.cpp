// SPDX-License-Identifier: Apache-2.0
// The AVX2 + FMA + F16C instance of the generic kernels in isa_kernels.inc. Only this region is
// compiled for AVX2; isa() selects it when cpu_info() reports avx2, fma and f16c (and AVX-512 is
// absent or disabled).
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
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif
namespace tandem::cpu::avx2 {
constexpr const char* kIsaName = "avx2";
#include "kernels/simd_avx2.h"
// The generic kernels below use the V just defined.
#include "isa_kernels.inc"
}  // namespace tandem::cpu::avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop

#else
namespace tandem::cpu::avx2 {
const IsaKernels* table() { return nullptr; }
}  // namespace tandem::cpu::avx2
#endif
