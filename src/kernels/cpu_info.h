// SPDX-License-Identifier: Apache-2.0
// Kernel toolkit (src/kernels): what the host CPU is and can do: model name, thread count, ISA
// features detected at run time (isa_dispatch.h turns them into the kernels' variant choice).
#pragma once

#include <cstdint>
#include <string>

namespace tandem::cpu {

struct CpuInfo {
  std::string model;  // /proc/cpuinfo "model name"
  int threads = 1;    // hardware threads
  int64_t memory_bytes = 0;
  bool avx2 = false, fma = false, f16c = false, avx512f = false, avx512bw = false,
       avx512vnni = false, avx512bf16 = false;
  std::string features() const;  // "avx2 fma f16c avx512f ..."
};

const CpuInfo& cpu_info();

}  // namespace tandem::cpu
