// SPDX-License-Identifier: Apache-2.0
// The ISA rule of the kernel toolkit (isa_dispatch.h).
#include "isa_dispatch.h"

#include <cstdlib>
#include <string>

#include "cpu_info.h"

namespace tandem::cpu {

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

std::vector<Isa> supported_isas() {
  const CpuInfo& c = cpu_info();
  std::vector<Isa> out;
  if (c.avx512f && c.avx512bw && c.fma && c.f16c) out.push_back(Isa::kAvx512);
  if (c.avx2 && c.fma && c.f16c) out.push_back(Isa::kAvx2);
  out.push_back(Isa::kScalar);
  return out;
}

std::vector<Isa> usable_isas() {
  const char* env = std::getenv("TANDEM_CPU_ISA");
  const std::string want = env ? env : "";
  Isa cap = Isa::kAvx512;
  if (want == "avx2")
    cap = Isa::kAvx2;
  else if (!want.empty() && want != "avx512")
    cap = Isa::kScalar;
  std::vector<Isa> out;
  for (Isa isa : supported_isas())
    if (static_cast<int>(isa) <= static_cast<int>(cap)) out.push_back(isa);
  return out;
}

}  // namespace tandem::cpu
