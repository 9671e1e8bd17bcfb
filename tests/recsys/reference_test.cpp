// SPDX-License-Identifier: Apache-2.0
// Each model's scores for fixed inputs against the independent numpy implementation
// (scripts/recsys/reference.py wrote tests/recsys/data/reference.json), for f32 tables exactly to
// float rounding and for f16 / int8 tables within the storage formats' error.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/recsys/model.h"

namespace tandem::rec {
namespace {

QueryInputs query_from_json(const nlohmann::json& j) {
  QueryInputs q;
  q.rows = j["rows"].get<int64_t>();
  for (double v : j["dense"]) q.dense.push_back(static_cast<float>(v));
  q.ids = j["ids"].get<std::vector<std::vector<int64_t>>>();
  q.offsets = j["offsets"].get<std::vector<std::vector<int64_t>>>();
  if (j.contains("item_ids")) {
    q.item_ids = j["item_ids"].get<std::vector<std::vector<int64_t>>>();
    q.seq_ids = j["seq_ids"].get<std::vector<std::vector<int64_t>>>();
  }
  return q;
}

nlohmann::json reference() {
  std::ifstream f(TANDEM_REC_REFERENCE_JSON);
  EXPECT_TRUE(f) << TANDEM_REC_REFERENCE_JSON;
  return nlohmann::json::parse(f);
}

TEST(RecReference, EveryTinyModelMatchesNumpy) {
  const auto ref = reference();
  std::set<std::string> seen;
  for (const auto& c : ref["cases"]) {
    const std::string name = c["model"];
    seen.insert(name);
    const RecModel m = RecModel::generate(zoo_config(name));
    const QueryInputs q = query_from_json(c["query"]);
    const std::vector<float> got = m.forward(q);
    const auto want = c["scores"].get<std::vector<double>>();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 2e-6) << name << " row " << i;
  }
  for (const char* k : {"tiny-dlrm", "tiny-dlrm-cat", "tiny-wnd", "tiny-din", "tiny-bst"})
    EXPECT_TRUE(seen.count(k)) << k;
}

TEST(RecReference, HalfAndInt8TablesStayClose) {
  const auto ref = reference();
  for (DType dt : {DType::kF16, DType::kI8}) {
    for (const auto& c : ref["cases"]) {
      ModelConfig cfg = zoo_config(c["model"]);
      cfg.table_dtype = dt;
      const RecModel m = RecModel::generate(cfg);
      const std::vector<float> got = m.forward(query_from_json(c["query"]));
      const auto want = c["scores"].get<std::vector<double>>();
      const double tol = dt == DType::kF16 ? 2e-3 : 3e-2;
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], tol) << cfg.name << " " << dtype_name(dt) << " row " << i;
    }
  }
}

}  // namespace
}  // namespace tandem::rec
