// SPDX-License-Identifier: Apache-2.0
// Bad input never crashes: randomly truncated and byte-flipped weight files, table files and
// configs either load or raise a tandem::Error (never another exception, never a crash).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>

#include "tandem/core/error.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/weights.h"

namespace tandem::rec {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string mutate(const std::string& good, std::mt19937_64& rng, size_t hot_prefix) {
  std::string s = good;
  switch (rng() % 3) {
    case 0:  // truncate
      s.resize(rng() % s.size());
      break;
    case 1:  // flip bytes, mostly in the header
      for (int i = 0, n = 1 + int(rng() % 4); i < n; ++i) {
        const size_t at = rng() % 4 ? rng() % std::min(hot_prefix, s.size()) : rng() % s.size();
        s[at] = static_cast<char>(rng());
      }
      break;
    default:  // overwrite a digit of the header with another digit (plausible but wrong numbers)
      for (int i = 0; i < 3; ++i) {
        const size_t at = rng() % std::min(hot_prefix, s.size());
        if (s[at] >= '0' && s[at] <= '9') s[at] = static_cast<char>('0' + rng() % 10);
      }
  }
  return s;
}

template <class F>
void expect_error_or_success(const std::string& what, F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": non-tandem exception: " << e.what();
  }
}

TEST(RecRobustness, MutatedWeightFiles) {
  const ModelConfig cfg = zoo_config("tiny-bst");
  const std::string path = "/tmp/tandem_rec_fuzz_" + std::to_string(::getpid()) + ".safetensors";
  RecModel::generate(cfg).save(path);
  const std::string good = read_all(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(good[i])) << (8 * i);
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << mutate(good, rng, 8 + n);
    expect_error_or_success("weights", [&] { RecModel::load(cfg, path); });
  }
  std::remove(path.c_str());
}

// The config a weight file states must be JSON and the model being loaded (issue 24: both were
// ignored, so another model's weights of matching shapes loaded silently).
TEST(RecRobustness, StoredConfigMustDescribeTheModel) {
  const ModelConfig cfg = zoo_config("tiny-dlrm");
  const std::string path = "/tmp/tandem_rec_cfg_" + std::to_string(::getpid()) + ".safetensors";
  RecModel::generate(cfg).save(path);
  EXPECT_NO_THROW(RecModel::load(cfg, path));
  SafetensorsFile f = read_safetensors(path);
  auto load_error = [&](const std::string& stated) -> std::string {
    f.metadata["tandem.config"] = stated;
    write_safetensors(path, f);
    try {
      RecModel::load(cfg, path);
    } catch (const ParseError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(load_error("not json").find("__metadata__.tandem.config"), std::string::npos);
  EXPECT_NE(load_error("[1]").find("is not a JSON object"), std::string::npos);
  // What does not shape the weights may differ (rec-serve --query-size when they were saved).
  nlohmann::json workload = cfg.to_json();
  workload["query_size"] = 7;
  workload["seed"] = 99;
  EXPECT_EQ(load_error(workload.dump()), "");
  nlohmann::json other = cfg.to_json();
  other["top_mlp"] = {7, 1};
  EXPECT_NE(load_error(other.dump())
                .find("describes another model than 'tiny-dlrm' (first "
                      "difference: 'top_mlp')"),
            std::string::npos)
      << load_error(other.dump());
  std::remove(path.c_str());
}

TEST(RecRobustness, MutatedTableFiles) {
  const std::string path = "/tmp/tandem_rec_fuzz_" + std::to_string(::getpid()) + ".temb";
  EmbeddingTable::generate("t", 40, 6, DType::kI8, 1, 0.5f).write_file(path);
  const std::string good = read_all(path);
  std::mt19937_64 rng(12);
  for (int i = 0; i < 300; ++i) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << mutate(good, rng, 64);
    expect_error_or_success("table", [&] {
      const auto t = EmbeddingTable::map_file(path);
      std::vector<float> row(static_cast<size_t>(t.dim()));
      t.read_row(t.rows() - 1, row.data());
    });
  }
  std::remove(path.c_str());
}

TEST(RecRobustness, MutatedConfigs) {
  const std::string good = builtin_zoo_json();
  std::mt19937_64 rng(13);
  for (int i = 0; i < 300; ++i) {
    const std::string text = mutate(good, rng, good.size());
    expect_error_or_success("config", [&] {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(text);
      } catch (const nlohmann::json::exception&) {
        return;  // not JSON at all: the file readers report this as ParseError
      }
      for (const auto& m : parse_zoo(j, "mutated")) (void)m.table_bytes();
    });
  }
}

}  // namespace
}  // namespace tandem::rec
