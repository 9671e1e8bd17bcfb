// SPDX-License-Identifier: Apache-2.0
// Run-time choice of the ISA table (kernels/isa_dispatch.h), and the dispatched row routines
// declared in isa.h.
#include "isa.h"

#include "kernels/cpu_info.h"
#include "kernels/dequant.h"
#include "kernels/isa_dispatch.h"
#include "tandem/core/log.h"

namespace tandem::cpu {
namespace {

const IsaKernels* pick() {
  const IsaKernels* t = variant(usable_isas(), avx512::table(), avx2::table(), scalar::table());
  log().debug("cpu kernels: {} variant (host features: {})", t->name, cpu_info().features());
  return t;
}

}  // namespace

const IsaKernels& isa() {
  static const IsaKernels* t = pick();
  return *t;
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  isa().dequantize_row(t, src, dst, n);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  isa().quantize_row(t, src, dst, n);
}

}  // namespace tandem::cpu
