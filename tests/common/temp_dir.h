// SPDX-License-Identifier: Apache-2.0
// Shared test fixtures: a private temporary folder that removes itself, and numbered names.
//
//   tandem::fixtures::TempDir dir("kvcal");           // /tmp/tandem-kvcal-XXXXXX, unique per call
//   save(dir.file("cal.json"));                      // removed with everything in it at scope end
//   tandem::fixtures::numbered("dev", 2);             // "dev2"
#pragma once

#include <unistd.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tandem::fixtures {

class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("tandem-" + tag + "-XXXXXX")).string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// prefix + i, built with += (GCC 12 at -O3 reports a false -Wstringop-overflow for
// `"literal" + std::to_string(i)`).
inline std::string numbered(const std::string& prefix, size_t i) {
  std::string s = prefix;
  s += std::to_string(i);
  return s;
}

}  // namespace tandem::fixtures
