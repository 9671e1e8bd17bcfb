// SPDX-License-Identifier: Apache-2.0
// The baseline instance of the generic kernels in isa_kernels.inc (one float per "vector"):
// compiled for the default target, it runs on every CPU and architecture.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "isa.h"
#include "kernels/dequant.h"
#include "tandem/core/error.h"

namespace tandem::cpu::scalar {
constexpr const char* kIsaName = "scalar";
#include "kernels/simd_scalar.h"
// The generic kernels below use the V just defined.
#include "isa_kernels.inc"
}  // namespace tandem::cpu::scalar
