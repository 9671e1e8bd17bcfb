// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the GGUF tests: byte writers (and the shared TempDir, tests/common).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"

namespace tandem::llm::testing {

using tandem::fixtures::TempDir;

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

}  // namespace tandem::llm::testing
