// SPDX-License-Identifier: Apache-2.0
// Run-time choice of the ISA table, and the dispatched row routines declared in dequant.h.
#include "isa.h"

#include <cstdlib>
#include <string>

#include "../cpu_info.h"
#include "dequant.h"
#include "tandem/core/log.h"

namespace tandem::cpu {
namespace {

const IsaKernels* pick() {
  const CpuInfo& c = cpu_info();
  const char* env = std::getenv("TANDEM_CPU_ISA");
  const std::string want = env ? env : "";
  const IsaKernels* t = nullptr;
  if (want.empty() || want == "avx512") {
    if (c.avx512f && c.avx512bw && c.fma && c.f16c) t = avx512::table();
  }
  if (!t && (want.empty() || want == "avx512" || want == "avx2")) {
    if (c.avx2 && c.fma && c.f16c) t = avx2::table();
  }
  if (!t) t = scalar::table();
  log().debug("cpu kernels: {} variant (host features: {})", t->name, c.features());
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
