// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the fuzz targets (header-only, test code):
//  - accepted(read): the reader's result, or nullopt when it refused the input with a
//    tandem::Error. Any other exception escapes, so libFuzzer and the replay test report it.
//  - fuzz_file(name, bytes): writes bytes to `name` in a scratch folder private to this process
//    (made with mkdtemp under $TMPDIR, else /dev/shm, else the temp directory; removed at exit)
//    and returns its path, for readers that only take a path. /dev/shm first: on ext4, rewriting
//    a truncated file waits for the disk (fuzzing ran ~150 inputs a second instead of thousands).
//  - must(cond, what): aborts with a message when a property of an accepted input does not hold.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/core/error.h"

namespace tandem::fuzz {

template <class Read>
auto accepted(Read&& read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const tandem::Error&) {
    return std::nullopt;  // refused with a message: the expected outcome for malformed input
  }
}

inline void must(bool cond, const char* what) {
  if (cond) return;
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

class ScratchDir {
 public:
  ScratchDir() {
    std::error_code ec;
    const bool shm =
        std::getenv("TMPDIR") == nullptr && std::filesystem::is_directory("/dev/shm", ec);
    const std::filesystem::path root = shm ? "/dev/shm" : std::filesystem::temp_directory_path();
    std::string templ = (root / "tandem-fuzz-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    path_ = templ;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

inline std::string fuzz_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  must(static_cast<bool>(f), "cannot write the scratch file");
  return path;
}

inline std::string scratch_path(const std::string& name) { return (scratch_dir() / name).string(); }

}  // namespace tandem::fuzz
