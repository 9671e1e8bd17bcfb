// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4), incremental: used to verify downloaded model files against a pinned digest.
//
//   tandem::llm::Sha256 h;
//   h.update(data, n);
//   std::string hex = h.hex_digest();   // 64 lowercase hex digits; the object is then finished
//
// Thread-safety: one object per thread. Exported (not a public header) so the tests can reach it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "tandem/export.h"

namespace tandem::llm {

class TANDEM_API Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::array<uint8_t, 32> digest();  // finishes; update() afterwards is a ContractError
  std::string hex_digest();

 private:
  void compress(const uint8_t* block);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buf_{};
  size_t buf_len_ = 0;
  uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

// Digest of a whole regular file, read in chunks up to its size at the start; `progress(done,
// total)` (may be empty) after each chunk. IoError when the file cannot be read or is not a regular
// file (a device such as /dev/zero, a FIFO, a directory).
TANDEM_API std::string sha256_file(const std::string& path,
                                   const std::function<void(int64_t, int64_t)>& progress = {});

}  // namespace tandem::llm
