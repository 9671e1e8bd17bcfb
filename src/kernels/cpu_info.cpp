// SPDX-License-Identifier: Apache-2.0
#include "cpu_info.h"

#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <fstream>
#include <thread>

namespace tandem::cpu {

std::string CpuInfo::features() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  return s.empty() ? "baseline" : s;
}

namespace {
CpuInfo detect() {
  CpuInfo info;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) info.model = line.substr(colon + 2);
      break;
    }
  }
  if (info.model.empty()) info.model = "unknown CPU";
  info.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) info.memory_bytes = static_cast<int64_t>(pages) * page;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  info.avx2 = __builtin_cpu_supports("avx2");
  info.fma = __builtin_cpu_supports("fma");
  {  // clang 14's __builtin_cpu_supports has no "f16c": read CPUID leaf 1, ECX bit 29 directly
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    info.f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
  }
  info.avx512f = __builtin_cpu_supports("avx512f");
  info.avx512bw = __builtin_cpu_supports("avx512bw");
  info.avx512vnni = __builtin_cpu_supports("avx512vnni");
  info.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return info;
}
}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = detect();
  return info;
}

}  // namespace tandem::cpu
