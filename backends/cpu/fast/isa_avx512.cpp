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

#include "kernels/isa_region_avx512.h"
namespace tandem::cpu::avx512 {
constexpr const char* kIsaName = "avx512";
#include "kernels/simd_avx512.h"
// The generic kernels below use the V just defined.
#include "isa_kernels.inc"
}  // namespace tandem::cpu::avx512
#include "kernels/isa_region_end.h"

#else
namespace tandem::cpu::avx512 {
const IsaKernels* table() { return nullptr; }
}  // namespace tandem::cpu::avx512
#endif
