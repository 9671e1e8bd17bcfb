// SPDX-License-Identifier: Apache-2.0
// Model configs: the zoo parses, the built-in copy equals configs/recsys/zoo.json, and bad configs
// are rejected with messages naming the JSON path.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/recsys/config.h"

namespace tandem::rec {
namespace {

nlohmann::json base_dlrm() {
  return nlohmann::json::parse(R"({"kind": "dlrm", "dense_features": 4, "bottom_mlp": [8, 4],
    "top_mlp": [8, 1], "embedding_dim": 4, "pooling": 3, "interaction": "dot",
    "tables": [{"rows": 10, "count": 2}]})");
}

std::string error_of(const nlohmann::json& j) {
  try {
    parse_model_config(j, "m", "test.json", "models.m");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(RecConfig, BuiltinZooEqualsTheCommittedFile) {
  std::ifstream f(TANDEM_REC_ZOO_JSON);
  ASSERT_TRUE(f) << TANDEM_REC_ZOO_JSON;
  const auto file = nlohmann::json::parse(f);
  EXPECT_EQ(file, nlohmann::json::parse(builtin_zoo_json()));
}

TEST(RecConfig, ZooHasTheSpecModelsAtRealSizes) {
  const auto names = zoo_names();
  for (const char* n : {"rm1", "rm2", "rm3", "wnd", "din", "bst", "dlrm-bench"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  const ModelConfig rm1 = zoo_config("rm1");
  EXPECT_EQ(rm1.kind, ModelKind::kDlrm);
  ASSERT_EQ(rm1.tables.size(), 8u);
  EXPECT_EQ(rm1.tables[0].rows, 4000000);
  EXPECT_EQ(rm1.tables[0].pooling, 80);
  EXPECT_EQ(rm1.tables[7].name, "emb.7");
  EXPECT_EQ(zoo_config("rm2").tables.size(), 32u);
  const ModelConfig bst = zoo_config("bst");
  EXPECT_EQ(bst.item_dim(), 64);
  EXPECT_EQ(bst.seq_len, 20);
  EXPECT_EQ(bst.tables.size(), 4u);
  EXPECT_EQ(bst.tables[3].dim, 8);
}

TEST(RecConfig, ScaleRowsKeepsAtLeastOneRow) {
  ModelConfig c = zoo_config("rm1");
  const int64_t before = c.table_bytes();
  c.scale_rows(1.0 / 16);
  EXPECT_EQ(c.tables[0].rows, 250000);
  EXPECT_NEAR(double(c.table_bytes()), before / 16.0, before * 1e-6);
  c.scale_rows(1e-9);
  EXPECT_EQ(c.tables[0].rows, 1);
  EXPECT_THROW(c.scale_rows(0), InvalidArgument);
  // Past 2^40 rows a table, or 2^50 bytes all tables: refused, the config unchanged.
  EXPECT_THROW(c.scale_rows(1e13), InvalidArgument);
  EXPECT_EQ(c.tables[0].rows, 1);
  c.tables[0].rows = int64_t{1} << 40;
  EXPECT_THROW(c.scale_rows(1.5), InvalidArgument);  // rows
  c.tables[0].dim = 65536;
  EXPECT_THROW(c.scale_rows(1), InvalidArgument);  // bytes
  EXPECT_EQ(c.tables[0].rows, int64_t{1} << 40);
}

// Found by the recsys_config fuzz target: 4096 tables of 2^40 rows x 65536 overflowed
// table_bytes() (int64) for rec-serve.
TEST(RecConfig, RejectsTablesPastOnePebibyte) {
  auto j = base_dlrm();
  j["interaction"] = "cat";
  j["tables"] = {{{"rows", int64_t{1} << 40}, {"dim", 65536}, {"count", 4096}}};
  EXPECT_NE(error_of(j).find("models.m.tables: the tables hold more than 2^50 bytes"),
            std::string::npos)
      << error_of(j);
}

TEST(RecConfig, FitTablesScalesDownToTheBudget) {
  ModelConfig c = zoo_config("wnd");
  const int64_t budget = int64_t{256} << 20;
  const double f = c.fit_tables(budget);
  EXPECT_LT(f, 1.0);
  EXPECT_LE(c.table_bytes(), budget * 1.001);
  EXPECT_GT(c.table_bytes(), budget * 0.99);
  ModelConfig t = zoo_config("tiny-dlrm");
  const int64_t before = t.table_bytes();
  EXPECT_EQ(t.fit_tables(budget), 1.0);
  EXPECT_EQ(t.table_bytes(), before);
  EXPECT_THROW(t.fit_tables(0), InvalidArgument);
}

TEST(RecConfig, RoundTripsThroughJson) {
  for (const char* name : {"tiny-din", "tiny-sasrec", "tiny-dssm", "recflow-din"}) {
    const ModelConfig a = zoo_config(name);
    const ModelConfig b = parse_model_config(a.to_json(), a.name);
    EXPECT_EQ(b.to_json(), a.to_json()) << name;
  }
}

TEST(RecConfig, RejectsBadConfigsNamingThePath) {
  auto j = base_dlrm();
  j["tables"][0]["rows"] = 0;
  EXPECT_NE(error_of(j).find("models.m.tables[0].rows: expected a positive integer"),
            std::string::npos)
      << error_of(j);
  j = base_dlrm();
  j["top_mlp"] = {8, 2};
  EXPECT_NE(error_of(j).find("models.m.top_mlp: the top MLP must end with a layer of width 1"),
            std::string::npos);
  j = base_dlrm();
  j["bottom_mlp"] = {8, 5};
  EXPECT_NE(
      error_of(j).find("dot interaction: table emb.0 has width 4 but the bottom MLP ends at 5"),
      std::string::npos);
  j = base_dlrm();
  j["tables"][0]["dim"] = 1 << 30;
  EXPECT_NE(error_of(j).find("models.m.tables[0].dim: at most 65536"), std::string::npos)
      << error_of(j);
  j = base_dlrm();
  j["colour"] = "red";
  EXPECT_NE(error_of(j).find("unknown key 'colour'"), std::string::npos);
  j = base_dlrm();
  j["kind"] = "xgboost";
  EXPECT_NE(error_of(j).find("models.m.kind: unknown model kind 'xgboost'"), std::string::npos);
  j = base_dlrm();
  j["seq_len"] = 4;
  EXPECT_NE(error_of(j).find("only DIN, BST, SASRec and DSSM models have 'seq_len'"),
            std::string::npos)
      << error_of(j);
  j = base_dlrm();
  j["table_dtype"] = "q4_0";
  EXPECT_NE(error_of(j).find("unsupported table dtype 'q4_0'"), std::string::npos);
  auto b = nlohmann::json::parse(builtin_zoo_json())["models"]["tiny-bst"];
  b["heads"] = 5;
  EXPECT_NE(error_of(b).find("models.m.heads: the item width 8 is not a multiple of 5 heads"),
            std::string::npos)
      << error_of(b);
  auto sas = nlohmann::json::parse(builtin_zoo_json())["models"]["tiny-sasrec"];
  sas["tables"] = {{{"rows", 5}}};
  EXPECT_NE(error_of(sas).find("models.m.tables: SASRec reads only the behaviour sequence"),
            std::string::npos)
      << error_of(sas);
  auto dssm = nlohmann::json::parse(builtin_zoo_json())["models"]["tiny-dssm"];
  dssm.erase("tower_mlp");
  EXPECT_NE(error_of(dssm).find("models.m: missing required key 'tower_mlp'"), std::string::npos)
      << error_of(dssm);
  dssm["tower_mlp"] = nlohmann::json::array();
  EXPECT_NE(error_of(dssm).find("models.m.tower_mlp: need at least one layer"), std::string::npos)
      << error_of(dssm);
}

TEST(RecConfig, UnknownModelAndMissingFile) {
  try {
    zoo_config("rm9");
    FAIL();
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find("rm1"), std::string::npos);
  }
  EXPECT_THROW(load_model_config("/nonexistent/model.json"), IoError);
}

}  // namespace
}  // namespace tandem::rec
