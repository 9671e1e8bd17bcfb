// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the GGUF reader: the input bytes become a file (a memfd, so the real mmap path
// runs), GgufFile opens it, and every key and tensor is touched (typed getters, JSON, tensor views
// dequantized to float, the vocabulary). Any input must either work or raise a tandem::Error;
// anything else (another exception, a crash, a sanitizer report) is a bug. Built as a libFuzzer
// binary with clang (scripts/fuzz.sh) and, everywhere, as a replay test over
// tests/fuzz/corpus/gguf.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/vocab.h"

namespace {

void touch(const tandem::llm::GgufFile& f) {
  using tandem::llm::GgufType;
  for (const std::string& key : f.keys()) {
    try {
      switch (f.type_of(key)) {
        case GgufType::kString:
          (void)f.get_string(key);
          break;
        case GgufType::kBool:
          (void)f.get_bool(key);
          break;
        case GgufType::kF32:
        case GgufType::kF64:
          (void)f.get_float(key);
          break;
        case GgufType::kArray:
          try {
            (void)f.get_string_array(key);
          } catch (const tandem::ParseError&) {
            (void)f.get_float_array(key);
          }
          break;
        default:
          (void)f.get_int(key);
      }
    } catch (const tandem::ParseError&) {
      // u64 beyond int64, nested arrays: reported, not crashed on
    }
  }
  (void)f.metadata_json(4).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const auto& info : f.tensors()) {
    try {
      const tandem::Tensor t = f.tensor(info.name);
      if (info.nbytes <= (1u << 20)) (void)t.to_float_vector();
    } catch (const tandem::Unsupported&) {
      // K-quants and other types list fine but have no tandem dtype
    }
  }
  try {
    (void)tandem::llm::load_vocab(f);
  } catch (const tandem::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("gguf_fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (done == size) {
    try {
      const tandem::llm::GgufFile f("/proc/self/fd/" + std::to_string(fd));
      touch(f);
    } catch (const tandem::Error&) {
      // expected for malformed inputs
    }
  }
  close(fd);
  return 0;
}
