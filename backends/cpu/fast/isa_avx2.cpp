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

#include "kernels/isa_region_avx2.h"
namespace tandem::cpu::avx2 {
constexpr const char* kIsaName = "avx2";
#include "kernels/simd_avx2.h"
// The generic kernels below use the V just defined.
#include "isa_kernels.inc"
}  // namespace tandem::cpu::avx2
#include "kernels/isa_region_end.h"

#else
namespace tandem::cpu::avx2 {
const IsaKernels* table() { return nullptr; }
}  // namespace tandem::cpu::avx2
#endif
