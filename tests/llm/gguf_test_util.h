// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the GGUF tests: byte writers, random K-quant weights (and the shared TempDir,
// tests/common).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"
#include "tandem/llm/synthetic_model.h"

namespace tandem::llm::testing {

using tandem::fixtures::TempDir;

// Random K-quant weights (llm::random_kquant), seeded from the test's generator.
inline Tensor random_kquant(const Shape& s, DType dt, std::mt19937_64& rng) {
  return llm::random_kquant(s, dt, 1.0f, rng());
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(n));
}
inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  write_file(path, bytes, bytes.size());
}

template <class T>
void append(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
inline void append_string(std::vector<uint8_t>& out, const std::string& s) {
  append<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
template <class T>
void patch(std::vector<uint8_t>& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof(T));
}
// Position of the first occurrence of `needle` in bytes (npos when absent).
inline size_t find_bytes(const std::vector<uint8_t>& bytes, const std::string& needle) {
  const std::string hay(bytes.begin(), bytes.end());
  return hay.find(needle);
}

// True when this host takes the int8 path (AVX-512 BW + VNNI, not switched off by environment).
inline bool host_has_int8_gemv() {
  for (const char* var : {"TANDEM_CPU_ISA", "TANDEM_INT8_GEMV"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != 0 && std::string(v) != "avx512") return false;
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" avx512bw") != std::string::npos &&
             line.find(" avx512_vnni") != std::string::npos &&
             line.find(" f16c") != std::string::npos;
    }
  }
  return false;
}

}  // namespace tandem::llm::testing
