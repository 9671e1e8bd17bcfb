// SPDX-License-Identifier: Apache-2.0
// RecStream (recstream.h): the configuration space, the inputs built from a model's graph, the
// weight file's checks, a GCN small enough to compute by hand, and the C++ forward against the
// trainer's numpy forward on the committed weights (bench/recsys/recstream_train.py fixture).
#include "tandem/recsys/recstream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "tandem/core/error.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

nlohmann::json matrix(int64_t rows, int64_t cols, double fill = 0) {
  return nlohmann::json(
      std::vector<std::vector<double>>(size_t(rows), std::vector<double>(size_t(cols), fill)));
}

// A valid weight document: hidden h, z hidden hz, head hidden hh, two configurations.
nlohmann::json weights_doc(int64_t h, int64_t hz, int64_t hh) {
  return {{"format", "tandem-recstream"},
          {"version", 1},
          {"executor", "sim"},
          {"device_class", "test"},
          {"configs", {"stream-pool:1", "recos:4", "recos:2"}},
          {"node_features", kNodeFeatures},
          {"load_features", kLoadFeatures},
          {"W1", matrix(kNodeFeatures, h)},
          {"b1", std::vector<double>(size_t(h), 0.0)},
          {"W2", matrix(h, h)},
          {"b2", std::vector<double>(size_t(h), 0.0)},
          {"Wz", matrix(kLoadFeatures, hz)},
          {"bz", std::vector<double>(size_t(hz), 0.0)},
          {"Wh", matrix(2 * h + hz, hh)},
          {"bh", std::vector<double>(size_t(hh), 0.0)},
          {"Wo", matrix(hh, 3)},
          {"bo", std::vector<double>(3, 0.0)},
          {"command", "hand-written"}};
}

TEST(RecStream, ConfigSpaceMapsOntoPolicies) {
  const auto space = stream_config_space();
  ASSERT_EQ(space.size(), 10u);
  std::set<std::string> names;
  for (const auto& c : space) {
    names.insert(c.name());
    const StreamConfig back = parse_stream_config(c.name());
    EXPECT_EQ(back.name(), c.name());
    const PolicyOptions po = c.apply(PolicyOptions{});
    EXPECT_EQ(po.policy, c.scheduler);
    EXPECT_EQ(po.streams, c.streams);
    EXPECT_TRUE(serving_policies().contains(po.policy)) << po.policy;
  }
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(space.front().name(), "stream-pool:1");
  EXPECT_EQ(space.back().name(), "recos:16");
  for (const char* bad : {"recos", "fcfs:2", "recos:0", "recos:x", "stream-pool:2000", ":4"})
    EXPECT_THROW(parse_stream_config(bad), InvalidArgument) << bad;
}

TEST(RecStream, InputsFromTheGraph) {
  const RecModel m = RecModel::generate(zoo_config("tiny-din"));
  SimExecutor ex(sim_device("h100"));
  const LoadShape load{.clients = 8, .rate_qps = 0, .mean_rows = 16, .p95_rows = 24};
  const RecStreamInputs in = recstream_inputs(m, ex, load);
  const Graph g = m.graph(16, ex.info().device);
  const int64_t n = g.size();
  ASSERT_EQ(in.x.rows, n);
  ASSERT_EQ(in.x.cols, kNodeFeatures);
  ASSERT_EQ(in.adj.rows, n);
  ASSERT_EQ(in.adj.cols, n);
  std::vector<std::set<int>> nb(static_cast<size_t>(n));
  for (const auto& [a, b] : g.edges()) nb[size_t(a)].insert(b), nb[size_t(b)].insert(a);
  const std::vector<OpCost> cost = ex.predict_nodes(m, 16);
  for (int64_t v = 0; v < n; ++v) {
    double kinds = 0, classes = 0;
    for (int k = 0; k < kNodeBuckets; ++k) kinds += in.x.at(v, k);
    for (int k = 0; k < 3; ++k) classes += in.x.at(v, kNodeBuckets + 4 + k);
    EXPECT_EQ(kinds, 1);
    EXPECT_EQ(classes, 1);
    EXPECT_EQ(in.x.at(v, node_bucket(g.node(int(v)).kind)), 1);
    EXPECT_DOUBLE_EQ(in.x.at(v, kNodeBuckets + 2), std::log1p(cost[size_t(v)].us));
    EXPECT_DOUBLE_EQ(in.x.at(v, kNodeBuckets + 3), cost[size_t(v)].share);
    // Â = D^-1/2 (A + I) D^-1/2 with d = 1 + neighbours.
    const double dv = 1.0 + double(nb[size_t(v)].size());
    EXPECT_NEAR(in.adj.at(v, v), 1 / dv, 1e-12);
    for (int64_t u = 0; u < n; ++u) {
      EXPECT_EQ(in.adj.at(v, u), in.adj.at(u, v));
      const double du = 1.0 + double(nb[size_t(u)].size());
      if (u != v) {
        const double want = nb[size_t(v)].count(int(u)) ? 1 / std::sqrt(dv * du) : 0;
        EXPECT_NEAR(in.adj.at(v, u), want, 1e-12);
      }
    }
  }
  const ModelConfig& c = m.config();
  ASSERT_EQ(in.z.size(), size_t(kLoadFeatures));
  EXPECT_DOUBLE_EQ(in.z[0], 3);  // log2 8
  EXPECT_DOUBLE_EQ(in.z[1], 0);
  EXPECT_DOUBLE_EQ(in.z[2], std::log(16.0));
  EXPECT_DOUBLE_EQ(in.z[3], std::log(24.0));
  EXPECT_DOUBLE_EQ(in.z[5], std::log1p(double(c.seq_len)));
  EXPECT_THROW(load_features(c, {.clients = 0}), InvalidArgument);
  EXPECT_THROW(load_features(c, {.clients = 2, .rate_qps = -1}), InvalidArgument);
}

// Three nodes in a chain 0 - 1 - 2 (degrees with self loops 2, 3, 2), hidden width 2, computed by
// hand: X has x0[0] = 1, x1[1] = 2, x2[0] = 4; W1 = [[1, -1], [0, 1]] on those two features with
// b1 = [0, 0.5]; W2 = [[1, 0], [1, -1]]; z = [1, 0, 0, 0, 0, 2] through Wz = [1, 0, 0, 0, 0,
// -0.25], bz = 0.5 (u = 1); Wh = ones, Wo = [1, -1, 0.5], bo = [0, 10, 0].
// H1 = [[0.5, 2/√6], [5/√6, 0], [2, 0]]; H2[:, 1] = 0 and H2[:, 0] = Â (H1[:, 0] + H1[:, 1]), so
// h = mean(H2[:, 0]) + max(H2[:, 0]) + u = 4.820795488287 (numpy gives the same).
TEST(RecStream, HandComputedGcn) {
  nlohmann::json d = weights_doc(2, 1, 1);
  d["W1"][0] = {1, -1};
  d["W1"][1] = {0, 1};
  d["b1"] = {0, 0.5};
  d["W2"] = {{1, 0}, {1, -1}};
  d["Wz"][0][0] = 1;
  d["Wz"][5][0] = -0.25;
  d["bz"] = {0.5};
  d["Wh"] = {{1}, {1}, {1}, {1}, {1}};
  d["Wo"] = {{1, -1, 0.5}};
  d["bo"] = {0, 10, 0};
  const RecStreamWeights w = parse_recstream_weights(d, "hand.json");
  RecStreamInputs in;
  in.x = {3, kNodeFeatures, std::vector<double>(3 * kNodeFeatures, 0.0)};
  in.x.at(0, 0) = 1;
  in.x.at(1, 1) = 2;
  in.x.at(2, 0) = 4;
  const double a = 1 / std::sqrt(6.0);
  in.adj = {3, 3, {0.5, a, 0, a, 1.0 / 3, a, 0, a, 0.5}};
  in.z = {1, 0, 0, 0, 0, 2};
  // H2[:, 0] by hand: Â applied to s = H1[:, 0] + H1[:, 1] = [0.5 + 2a, 5a, 2].
  const double s0 = 0.5 + 2 * a, s1 = 5 * a, s2 = 2;
  const double h20 = 0.5 * s0 + a * s1, h21 = a * s0 + s1 / 3 + a * s2, h22 = a * s1 + 0.5 * s2;
  const double h = (h20 + h21 + h22) / 3 + std::max({h20, h21, h22}) + 1;
  EXPECT_NEAR(h, 4.820795488287, 1e-11);
  const RecStreamPrediction p = recstream_predict(w, in);
  ASSERT_EQ(p.log_p99_ms.size(), 3u);
  EXPECT_NEAR(p.log_p99_ms[0], h, 1e-12);
  EXPECT_NEAR(p.log_p99_ms[1], 10 - h, 1e-12);
  EXPECT_NEAR(p.log_p99_ms[2], 0.5 * h, 1e-12);
  EXPECT_EQ(p.best, 2);
  EXPECT_NEAR(p.p99_ms(2), std::exp(0.5 * h), 1e-9);
  // Inputs of the wrong width.
  in.z.pop_back();
  EXPECT_THROW(recstream_predict(w, in), InvalidArgument);
}

void expect_parse_error(const nlohmann::json& d, const std::string& field) {
  try {
    parse_recstream_weights(d, "bad.json");
    ADD_FAILURE() << "accepted a file with a bad " << field;
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

TEST(RecStream, WrongWeightFilesAreRejectedByField) {
  EXPECT_NO_THROW(parse_recstream_weights(weights_doc(4, 3, 5), "ok.json"));
  auto d = weights_doc(4, 3, 5);
  d["version"] = 2;
  expect_parse_error(d, "version");
  d = weights_doc(4, 3, 5);
  d["format"] = "something-else";
  expect_parse_error(d, "format");
  d = weights_doc(4, 3, 5);
  d["W1"] = matrix(16, 4);  // one node feature short
  expect_parse_error(d, "W1");
  d = weights_doc(4, 3, 5);
  d["W2"] = matrix(4, 5);
  expect_parse_error(d, "W2");
  d = weights_doc(4, 3, 5);
  d["W2"][2] = {1, 2, 3};  // a ragged row
  expect_parse_error(d, "W2[2]");
  d = weights_doc(4, 3, 5);
  d["b1"] = {1, 2, 3};
  expect_parse_error(d, "b1");
  d = weights_doc(4, 3, 5);
  d["Wh"] = matrix(10, 5);  // expects 2 h + hz = 11 rows
  expect_parse_error(d, "Wh");
  d = weights_doc(4, 3, 5);
  d["Wo"] = matrix(5, 2);  // three configurations
  expect_parse_error(d, "Wo");
  d = weights_doc(4, 3, 5);
  d["bo"][1] = "x";
  expect_parse_error(d, "bo[1]");
  d = weights_doc(4, 3, 5);
  d["configs"][1] = "recos:zero";
  expect_parse_error(d, "configs[1]");
  d = weights_doc(4, 3, 5);
  d["configs"][2] = "recos:4";
  expect_parse_error(d, "configs[2]");
  d = weights_doc(4, 3, 5);
  d["node_features"] = 16;
  expect_parse_error(d, "node_features");
  d = weights_doc(4, 3, 5);
  d.erase("Wz");
  expect_parse_error(d, "Wz");
  EXPECT_THROW(load_recstream_weights("/nonexistent/recstream.json"), IoError);
}

// The committed weights, through the C++ forward, against the trainer's numpy forward on the
// inputs it stored with them.
TEST(RecStream, ForwardEqualsTheTrainersNumpyForward) {
  std::ifstream f(TANDEM_RECSTREAM_FIXTURE);
  ASSERT_TRUE(f) << TANDEM_RECSTREAM_FIXTURE;
  const nlohmann::json fx = nlohmann::json::parse(f);
  const RecStreamWeights w = load_recstream_weights(std::string(TANDEM_SOURCE_DIR) + "/" +
                                                    fx["weights"].get<std::string>());
  EXPECT_EQ(w.configs.size(), stream_config_space().size());
  ASSERT_FALSE(fx["cases"].empty());
  for (const auto& c : fx["cases"]) {
    RecStreamInputs in;
    auto read = [](const nlohmann::json& rows) {
      Matrix m{int64_t(rows.size()), int64_t(rows[0].size()), {}};
      for (const auto& r : rows)
        for (double v : r) m.v.push_back(v);
      return m;
    };
    in.x = read(c["x"]);
    in.adj = read(c["adj"]);
    in.z = c["z"].get<std::vector<double>>();
    const RecStreamPrediction p = recstream_predict(w, in);
    const auto want = c["log_p99_ms"].get<std::vector<double>>();
    ASSERT_EQ(p.log_p99_ms.size(), want.size());
    for (size_t k = 0; k < want.size(); ++k)
      EXPECT_NEAR(p.log_p99_ms[k], want[k], 1e-5) << c["model"] << " config " << k;
  }
}

}  // namespace
}  // namespace tandem::rec
