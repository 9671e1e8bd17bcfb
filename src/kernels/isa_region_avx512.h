// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit: opens a region of a kernel file compiled for AVX-512 (F + BW) with AVX2, FMA and
// F16C, whatever the file's own flags; kernels/isa_region_end.h closes it. Included textually, once
// per region (no include guard). GCC 12 reports false "may be used uninitialized" warnings inside
// the intrinsic headers, so those are off inside the region; clang has no "#pragma GCC target", its
// attribute pragma does the same.
//
//   #include "kernels/isa_region_avx512.h"
//   namespace my::avx512 { /* kernels using the intrinsics */ }
//   #include "kernels/isa_region_end.h"
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx2,fma,f16c")
#endif
