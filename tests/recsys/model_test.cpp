// SPDX-License-Identifier: Apache-2.0
// Models as op graphs: node structure and cost classes, weight files (round trip and bad files),
// input validation, and row independence (concatenated queries give the same scores).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "recsys_device.h"
#include "tandem/core/error.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/workload.h"

namespace tandem::rec {
namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/tandem_rec_model_" + std::to_string(::getpid()) + "_" + name;
}

TEST(RecModel, DlrmGraphHasOneNodePerUnitWithCostClasses) {
  ModelConfig cfg = zoo_config("rm2");
  cfg.scale_rows(1e-3);
  const RecModel m = RecModel::generate(cfg);
  const Graph g = m.graph(128, test_cpu_profile());
  // dense + 32 bags + 2 bottom + interaction + 3 top + out
  EXPECT_EQ(g.size(), 1 + 32 + 2 + 1 + 3 + 1);
  const OpNode& bag = g.node("emb.5");
  EXPECT_EQ(bag.kind, "emb_bag");
  EXPECT_EQ(bag.attrs.at("cost_class"), "MEM");
  EXPECT_EQ(g.node("top.0").kind, "mlp");
  EXPECT_EQ(g.node("top.0").flops, 2.0 * 128 * 128 * (64 + 32 * 64) + 2.0 * 128 * 128);
  EXPECT_EQ(g.node("out").attrs.at("cost_class"), "TINY");
  EXPECT_EQ(g.sinks(), std::vector<int>{g.find("out")});
  // RM3's big bottom MLP is compute-bound.
  ModelConfig rm3 = zoo_config("rm3");
  rm3.scale_rows(1e-4);
  EXPECT_EQ(RecModel::generate(rm3)
                .graph(128, test_cpu_profile())
                .node("bottom.0")
                .attrs.at("cost_class"),
            "COMP");
}

// The classes follow the device the graph is priced for, through the core cost model.
TEST(RecModel, CostClassesFollowTheDevice) {
  OpNode gemm = make_gemm_node("g", 128, 256, 256);  // 32 FLOP/byte
  DeviceProfile d = test_cpu_profile();              // ridge 7 FLOP/byte
  EXPECT_EQ(classify(gemm, d), CostClass::kComp);
  d.peak_flops = 1e15;  // ridge 1e5 FLOP/byte: the same GEMM is bandwidth-bound, and still > 5 us
  EXPECT_EQ(classify(gemm, d), CostClass::kMem);
  EXPECT_EQ(classify(gemm, d, {.tiny_s = 1.0}), CostClass::kTiny);
  // Another cost model: a launch overhead of 1 s makes nothing TINY.
  const RooflineCostModel slow({.launch_overhead_s = 1.0});
  OpNode tiny = make_gemm_node("t", 1, 1, 1);
  EXPECT_EQ(classify(tiny, d), CostClass::kTiny);
  EXPECT_NE(classify(tiny, d, {.model = &slow}), CostClass::kTiny);
  // A device without peaks cannot be priced.
  EXPECT_THROW(classify(gemm, DeviceProfile{}), InvalidArgument);
}

TEST(RecModel, SequenceModelGraphs) {
  const RecModel din = RecModel::generate(zoo_config("tiny-din"));
  const Graph g = din.graph(3, test_cpu_profile());
  for (const char* n : {"cand", "seq", "att_in", "att.0", "att.1", "att_pool", "top_in", "out"})
    EXPECT_GE(g.find(n), 0) << n;
  const RecModel bst = RecModel::generate(zoo_config("tiny-bst"));
  const Graph h = bst.graph(3, test_cpu_profile());
  for (const char* n : {"seq", "qkv", "mha", "attn_out", "ln1", "ffn.0", "ffn_out", "ln2"})
    EXPECT_GE(h.find(n), 0) << n;
  EXPECT_EQ(h.node("mha").kind, "attention");
  // SASRec: the block over the L behaviours only, the last position as the user vector.
  const RecModel sas = RecModel::generate(zoo_config("tiny-sasrec"));
  const Graph s = sas.graph(3, test_cpu_profile());
  const int64_t L = sas.config().seq_len, di = sas.config().item_dim();
  EXPECT_EQ(s.node("seq").output_shapes[0], (Shape{3, L, di}));
  EXPECT_EQ(s.node("ln2").output_shapes[0], (Shape{3 * L, di}));
  EXPECT_EQ(s.node("user").output_shapes[0], (Shape{3, di}));
  EXPECT_EQ(s.node("cand").output_shapes[0], (Shape{3, di}));
  EXPECT_EQ(s.node("match").output_shapes[0], (Shape{3, di}));
  EXPECT_EQ(s.node("out").output_shapes[0], (Shape{3, 1}));
  // DSSM: two towers meeting in one product.
  const RecModel dssm = RecModel::generate(zoo_config("tiny-dssm"));
  const Graph d = dssm.graph(4, test_cpu_profile());
  const int64_t tw = dssm.config().tower_mlp.back();
  EXPECT_EQ(d.node("seq_mean").output_shapes[0], (Shape{4, dssm.config().item_dim()}));
  EXPECT_EQ(d.node("user_tower.1").output_shapes[0], (Shape{4, tw}));
  EXPECT_EQ(d.node("item_tower.1").output_shapes[0], (Shape{4, tw}));
  EXPECT_EQ(d.node("match").output_shapes[0], (Shape{4, tw}));
  EXPECT_EQ(d.node("out").output_shapes[0], (Shape{4, 1}));
}

TEST(RecModel, WeightsRoundTripThroughSafetensors) {
  for (DType dt : {DType::kF32, DType::kI8}) {
    ModelConfig cfg = zoo_config("tiny-wnd");
    cfg.table_dtype = dt;
    const RecModel a = RecModel::generate(cfg);
    const std::string path = temp_path("w.safetensors");
    a.save(path);
    const RecModel b = RecModel::load(cfg, path);
    QueryFactory f(cfg, WorkloadOptions{});
    const QueryInputs q = f.make(0, 7);
    EXPECT_EQ(a.forward(q), b.forward(q));
    // The wrong config: a clear error naming the first difference from the config stored in the
    // file (issue 24: the stored tandem.config is checked before any tensor is read).
    ModelConfig other = cfg;
    other.top_mlp = {5, 1};
    try {
      RecModel::load(other, path);
      ADD_FAILURE();
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find("describes another model"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("'top_mlp'"), std::string::npos) << e.what();
    }
    std::remove(path.c_str());
  }
}

TEST(RecModel, BadWeightFilesGiveClearErrors) {
  const ModelConfig cfg = zoo_config("tiny-dlrm");
  const RecModel a = RecModel::generate(cfg);
  const std::string path = temp_path("bad.safetensors");
  a.save(path);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), {});
  }
  auto expect_parse = [&](const std::string& content, const std::string& what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    try {
      RecModel::load(cfg, path);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_parse(bytes.substr(0, 5), "too short");
  expect_parse(bytes.substr(0, bytes.size() - 16), "outside the data section");
  std::string huge = bytes;
  huge[6] = 1;  // header length ~2^48
  expect_parse(huge, "exceeds the file");
  std::string garbled = bytes;
  garbled[8] = '[';
  garbled[9] = '[';
  expect_parse(garbled, "invalid JSON");
  EXPECT_THROW(RecModel::load(cfg, "/nonexistent/w.safetensors"), IoError);
  std::remove(path.c_str());
}

TEST(RecModel, MappedTablesGiveTheSameScores) {
  for (DType dt : {DType::kF32, DType::kI8}) {
    ModelConfig cfg = zoo_config("tiny-din");
    cfg.table_dtype = dt;
    const std::string dir = temp_path("tables");
    const RecModel a = RecModel::generate(cfg);
    const RecModel b = RecModel::generate_mapped(cfg, dir);
    const RecModel c = RecModel::generate_mapped(cfg, dir);  // reuses the files
    EXPECT_TRUE(b.tables()[0].mapped());
    EXPECT_TRUE(b.item_tables()[1].mapped());
    QueryFactory f(cfg, WorkloadOptions{});
    const QueryInputs q = f.make(0, 5);
    EXPECT_EQ(a.forward(q), b.forward(q));
    EXPECT_EQ(a.forward(q), c.forward(q));
    std::filesystem::remove_all(dir);
  }
}

TEST(RecModel, HotRowCachesKeepScoresAndCountHits) {
  const ModelConfig cfg = zoo_config("tiny-dlrm");
  RecModel m = RecModel::generate(cfg);
  WorkloadOptions w;
  w.index.dist = IndexDist::kZipf;
  w.index.zipf_s = 1.2;
  QueryFactory f(cfg, w);
  std::vector<QueryInputs> qs;
  std::vector<std::vector<float>> want;
  for (int i = 0; i < 20; ++i) {
    qs.push_back(f.make(uint64_t(i), 8));
    want.push_back(m.forward(qs.back()));
  }
  m.set_cache_rows(8);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(m.forward(qs[i]), want[i]);
  const auto stats = m.cache_stats();
  ASSERT_EQ(stats.size(), cfg.tables.size());
  for (const auto& s : stats) {
    EXPECT_GT(s.hits + s.misses, 0);
    EXPECT_GT(s.hit_rate(), 0.2);  // Zipf(1.2) over 20-50 rows with 8 cached rows
  }
  m.set_cache_rows(0);
  EXPECT_TRUE(m.cache_stats().empty());
}

TEST(RecModel, ValidateNamesTheBadInput) {
  const ModelConfig cfg = zoo_config("tiny-dlrm");
  const RecModel m = RecModel::generate(cfg);
  QueryFactory f(cfg, WorkloadOptions{});
  QueryInputs q = f.make(0, 4);
  EXPECT_NO_THROW(m.validate(q));
  QueryInputs bad = q;
  bad.ids[0][0] = 50;  // table emb.0 has 50 rows
  try {
    m.forward(bad);
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("table emb.0: id 50 outside [0, 50)"), std::string::npos)
        << e.what();
  }
  bad = q;
  bad.ids[2][0] = -123456789;  // a hashed table takes any raw id
  EXPECT_NO_THROW(m.forward(bad));
  bad = q;
  bad.dense.pop_back();
  EXPECT_THROW(m.forward(bad), InvalidArgument);
  bad = q;
  bad.offsets[1].back() += 1;
  EXPECT_THROW(m.forward(bad), InvalidArgument);
}

TEST(RecModel, RowsAreIndependentSoQueriesConcatenate) {
  for (const char* name : {"tiny-dlrm", "tiny-dlrm-cat", "tiny-wnd", "tiny-din", "tiny-bst"}) {
    const ModelConfig cfg = zoo_config(name);
    const RecModel m = RecModel::generate(cfg);
    QueryFactory f(cfg, WorkloadOptions{});
    const QueryInputs a = f.make(1, 3), b = f.make(2, 5);
    const QueryInputs ab = concat_queries({&a, &b});
    ASSERT_EQ(ab.rows, 8);
    std::vector<float> want = m.forward(a);
    const std::vector<float> sb = m.forward(b);
    want.insert(want.end(), sb.begin(), sb.end());
    const std::vector<float> got = m.forward(ab);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << name << " " << i;
  }
}

TEST(RecModel, NodesRunOneByOneInTopologicalOrder) {
  const ModelConfig cfg = zoo_config("tiny-bst");
  const RecModel m = RecModel::generate(cfg);
  QueryFactory f(cfg, WorkloadOptions{});
  const QueryInputs q = f.make(3, 4);
  QueryState st = m.make_state(q);
  const auto& order = m.topological_order();
  for (int id : order) m.run_node(id, st);
  EXPECT_EQ(m.scores(st), m.forward(q));
  for (float s : m.scores(st)) {
    EXPECT_GT(s, 0.0f);
    EXPECT_LT(s, 1.0f);
  }
}

}  // namespace
}  // namespace tandem::rec
