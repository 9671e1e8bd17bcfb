// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit: closes the region opened by kernels/isa_region_<isa>.h (no include guard).
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#pragma GCC diagnostic pop
