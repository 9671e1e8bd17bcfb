// SPDX-License-Identifier: Apache-2.0
// Hostile JSON (issue 24): every JSON input goes through tandem::parse_json / read_json_file, so
// deep nesting, repeated keys, numbers past double's range and non-regular files are refused with a
// tandem::Error naming the file; cluster values outside plausible ranges are refused by field.
#include "tandem/core/json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tandem/core/cluster.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

namespace fs = std::filesystem;

class JsonFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tandem_json_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  // The message of the tandem::Error that reading `path` as a cluster raises ("" when none).
  static std::string cluster_error(const std::string& path) {
    try {
      (void)ClusterSpec::from_json_file(path);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

std::string device(const std::string& fields, const std::string& name = "a") {
  return R"({"name": ")" + name +
         R"(", "peak_flops": 1e10, "mem_bandwidth_bytes_per_s": 4e9, "mem_bytes": 4e9)" + fields +
         "}";
}

::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected \"" << part << "\" in: \"" << text << "\"";
}

TEST_F(JsonFiles, DeepNestingIsRefusedBeforeItIsBuilt) {
  // 100,000 levels crashed (stack overflow) before the depth bound.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string path = write("deep.json", R"({"devices": )" + deep + "}");
  const std::string e = cluster_error(path);
  EXPECT_TRUE(has(e, path));
  EXPECT_TRUE(has(e, "nested deeper than 64 levels"));
  // At the bound itself the document is read (and then refused for what it says).
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_NO_THROW(parse_json(ok, "ok.json"));
  EXPECT_THROW(parse_json("[" + ok + "]", "deep.json"), ParseError);
}

TEST_F(JsonFiles, NumbersPastDoubleRangeNameTheFile) {
  const std::string path = write("huge.json", R"({"devices": [)" + device("") + R"(],
      "links": [], "description": "x", "extra": 1e999})");
  const std::string e = cluster_error(path);
  EXPECT_TRUE(has(e, path));
  EXPECT_TRUE(has(e, "number out of range: 1e999"));
  EXPECT_TRUE(has(e, "at byte "));
}

TEST_F(JsonFiles, RepeatedKeysAreRefused) {
  const std::string path =
      write("dup.json", R"({"devices": [{"name": "a", "peak_flops": 1e10, "peak_flops": 1e12,
      "mem_bandwidth_bytes_per_s": 4e9, "mem_bytes": 4e9}]})");
  const std::string e = cluster_error(path);
  EXPECT_TRUE(has(e, path));
  EXPECT_TRUE(has(e, "duplicate key 'peak_flops'"));
  // The same key in different objects is fine.
  EXPECT_NO_THROW(parse_json(R"([{"a": 1}, {"a": 2}, {"b": {"a": 3}}])", "ok.json"));
}

TEST_F(JsonFiles, OnlyRegularFilesAreRead) {
  const std::string e = cluster_error(dir_.string());
  EXPECT_TRUE(has(e, "is not a regular file"));
  EXPECT_TRUE(has(cluster_error("/dev/zero"), "'/dev/zero' is not a regular file"));
  EXPECT_THROW(read_text_file(write("big.json", std::string(100, ' ')), 99), IoError);
}

TEST_F(JsonFiles, ImplausibleClusterValuesAreRefusedByField) {
  // A link of 1e-300 B/s predicted latencies of 1e305 s; a latency of 1e308 s broke the planner.
  const std::string two =
      R"({"devices": [)" + device("") + ", " + device("", "b") + "], \"links\": [";
  auto link = [&](const std::string& bw, const std::string& lat) {
    return write("c.json", two + R"({"from": "a", "to": "b", "bandwidth_bytes_per_s": )" + bw +
                               R"(, "latency_s": )" + lat + "}]}");
  };
  EXPECT_EQ(cluster_error(link("1e9", "0.001")), "");
  EXPECT_TRUE(has(cluster_error(link("1e-300", "0.001")),
                  "links[0].bandwidth_bytes_per_s: expected a value in [1000, 1e+15]"));
  EXPECT_TRUE(has(cluster_error(link("1e9", "1e308")), "links[0].latency_s: expected a value in"));
  EXPECT_TRUE(has(cluster_error(write(
                      "s.json", R"({"devices": [)" + device(R"(, "speed_factor": 1e-300)") + "]}")),
                  "devices[0].speed_factor: expected a value in [0.001, 1000]"));
  EXPECT_TRUE(has(cluster_error(write("f.json", R"({"devices": [{"name": "a", "peak_flops": 1e-300,
      "mem_bandwidth_bytes_per_s": 4e9, "mem_bytes": 4e9}]})")),
                  "devices[0].peak_flops: expected a value in"));
}

}  // namespace
}  // namespace tandem
