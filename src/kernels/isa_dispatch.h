// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit: which vector ISA a run-time dispatched kernel may use on this CPU. The CPU
// backend's fast kernels and the engines' own kernels (the KV-quantized attention) pick their
// variant table here, so the rule and the TANDEM_CPU_ISA override are written once.
//
// An ISA is usable when the CPU has its features (avx512: avx512f + avx512bw + fma + f16c; avx2:
// avx2 + fma + f16c; scalar: always) and it is not above the cap TANDEM_CPU_ISA names ("avx512",
// "avx2", "scalar"; unset: no cap; anything else: scalar only).
//
//   static const Table* t = cpu::variant(cpu::usable_isas(), avx512::table(), avx2::table(),
//                                        scalar::table());   // a variant not compiled is null
//
// Thread-safety: reads the environment and cpu_info(); call from any thread.
#pragma once

#include <vector>

namespace tandem::cpu {

enum class Isa { kScalar, kAvx2, kAvx512 };

const char* to_string(Isa isa);  // "scalar", "avx2", "avx512"
// Every ISA this CPU can run, best first (ignores TANDEM_CPU_ISA): for tests and benchmarks that
// compare the variants.
std::vector<Isa> supported_isas();
// supported_isas() at or below the TANDEM_CPU_ISA cap, best first; never empty.
std::vector<Isa> usable_isas();

// The variant tables of `isas` (in their order) that this build compiled (non-null).
template <class Table>
std::vector<const Table*> variants(const std::vector<Isa>& isas, const Table* avx512,
                                   const Table* avx2, const Table* scalar) {
  std::vector<const Table*> out;
  for (Isa isa : isas) {
    const Table* t = isa == Isa::kAvx512 ? avx512 : isa == Isa::kAvx2 ? avx2 : scalar;
    if (t) out.push_back(t);
  }
  return out;
}
// The first of them (the scalar table must not be null).
template <class Table>
const Table* variant(const std::vector<Isa>& isas, const Table* avx512, const Table* avx2,
                     const Table* scalar) {
  const auto v = variants(isas, avx512, avx2, scalar);
  return v.empty() ? scalar : v.front();
}

}  // namespace tandem::cpu
