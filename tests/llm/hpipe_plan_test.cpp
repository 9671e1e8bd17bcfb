// SPDX-License-Identifier: Apache-2.0
// HPipe planning on a hand-made profile (no timing): DP 1 equals a brute-force search and respects
// memory, DP 2 beats every uniform slicing under its objective and shrinks slices toward the end,
// every system plans and round-trips through the plan contract JSON, HPipe is predicted faster than
// GPipe and Base on a heterogeneous cluster, and bad inputs are refused with clear errors.
#include "tandem/llm/hpipe.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "tandem/core/error.h"
#include "tandem/sched/planner.h"

namespace tandem::llm::hpipe {
namespace {

using sched::PipelinePlan;

// Reads a plan's JSON back as an HPipe plan (ParseError when it is not one).
LayerStages read_back(const nlohmann::json& j) {
  return layer_stages(PipelinePlan::from_json(j), "plan");
}

ModelProfile tiny_profile(int n_layers) {
  ModelProfile p;
  p.model_name = "synthetic";
  p.model_path = "model.gguf";
  p.sha256 = std::string(64, 'a');
  p.n_layers = n_layers;
  p.d_model = 512;
  p.d_ff = 1024;
  p.vocab_size = 1000;
  p.layer_weight_bytes = 4e6;
  p.embed_bytes = 2e6;
  p.head_bytes = 2e6;
  p.kv_bytes_per_token_layer = 2048;
  p.act_bytes_per_token = 2048;
  p.head_row_s = 1e-4;
  p.layer.s_grid = {8, 64, 512};
  p.layer.base_s = {1e-4, 6e-4, 5e-3};
  p.layer.a_sc = 2e-9;
  p.layer.a_c = 1e-8;
  return p;
}

// "d<i>", built with += (GCC 12 reports a false -Wstringop-overflow for "d" + std::string&& at
// -O3).
std::string dev_name(size_t i) {
  std::string name = "d";
  name += std::to_string(i);
  return name;
}

ClusterSpec cluster(const std::vector<double>& speeds, double mem = 1e12, double bw = 1.25e8) {
  nlohmann::json j;
  for (size_t i = 0; i < speeds.size(); ++i) {
    j["devices"].push_back({{"name", dev_name(i)},
                            {"peak_flops", 1e12 * speeds[i]},
                            {"mem_bandwidth_bytes_per_s", 1e11},
                            {"mem_bytes", mem},
                            {"speed_factor", speeds[i]},
                            {"power_w", 100.0 * speeds[i]}});
    if (i > 0) {
      j["links"].push_back({{"from", dev_name(i - 1)},
                            {"to", dev_name(i)},
                            {"bandwidth_bytes_per_s", bw},
                            {"latency_s", 1e-4}});
    }
  }
  return ClusterSpec::from_json(j);
}

double slowest_stage(const ModelProfile& p, const ClusterSpec& cl, const std::vector<int>& cuts,
                     int L) {
  double worst = 0;
  const size_t n = cl.devices.size();
  for (size_t j = 0; j < n; ++j) {
    StagePlan st{cl.devices[j].name, cuts[j], cuts[j + 1], j == 0, j + 1 == n};
    double t = stage_compute_s(p, cl.devices[j], st, L, 0);
    if (j + 1 < n) t += cl.transfer_time_s(cl.devices[j].name, cl.devices[j + 1].name, L * 2048.0);
    worst = std::max(worst, t);
  }
  return worst;
}

TEST(HpipePlan, LayerPartitionEqualsBruteForce) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> sp(0.2, 2.0);
  const ModelProfile p = tiny_profile(9);
  for (int trial = 0; trial < 10; ++trial) {
    const ClusterSpec cl = cluster({sp(rng), sp(rng), sp(rng), sp(rng)});
    const auto cuts = partition_layers(p, cl, 512, 1);
    ASSERT_EQ(cuts.size(), 5u);
    double best = std::numeric_limits<double>::infinity();
    for (int a = 1; a < 9; ++a)
      for (int b = a + 1; b < 9; ++b)
        for (int c = b + 1; c < 9; ++c)
          best = std::min(best, slowest_stage(p, cl, {0, a, b, c, 9}, 512));
    EXPECT_NEAR(slowest_stage(p, cl, cuts, 512), best, 1e-12);
    for (size_t j = 0; j + 1 < cuts.size(); ++j) EXPECT_LT(cuts[j], cuts[j + 1]);
  }
}

TEST(HpipePlan, FasterDevicesGetMoreLayers) {
  const ModelProfile p = tiny_profile(12);
  const auto cuts = partition_layers(p, cluster({0.4, 0.4, 1.0}), 512, 1);
  EXPECT_GT(cuts[3] - cuts[2], cuts[1] - cuts[0]);
}

TEST(HpipePlan, MemoryLimitsAreRespected) {
  const ModelProfile p = tiny_profile(8);
  // At 512 tokens a layer needs 4e6 + 2048 * 512 bytes, plus activations and embed/head.
  const double one_layer = stage_memory_bytes(p, 0, 1, false, false, 512);
  ClusterSpec cl = cluster({4.0, 1.0});  // the fast device would take most layers...
  cl.devices[0].mem_bytes = stage_memory_bytes(p, 0, 2, true, false, 512);  // ...but holds 2
  const auto cuts = partition_layers(p, cl, 512, 1);
  EXPECT_EQ(cuts[1], 2);
  cl.devices[1].mem_bytes = stage_memory_bytes(p, 0, 3, false, true, 512);  // 2 + 3 < 8
  try {
    partition_layers(p, cl, 512, 1);
    FAIL() << "expected Infeasible";
  } catch (const Infeasible& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'d0'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("holds 2 layers"), std::string::npos) << msg;
    EXPECT_NE(msg.find("holds 3 layers"), std::string::npos) << msg;
  }
  EXPECT_THROW(even_split(p, cl, 512, 1), Infeasible);
  EXPECT_GT(one_layer, p.layer_weight_bytes);
}

double slicing_objective(const ModelProfile& p, const ClusterSpec& cl,
                         const std::vector<StagePlan>& st, const std::vector<int>& slices) {
  double sum = 0, worst = 0, c = 0;
  for (int s : slices) {
    double b = 0;
    for (size_t j = 0; j < st.size(); ++j) {
      double t = stage_compute_s(p, cl.device(st[j].device), st[j], s, c);
      if (j + 1 < st.size()) t += cl.transfer_time_s(st[j].device, st[j + 1].device, s * 2048.0);
      b = std::max(b, t);
    }
    sum += b;
    worst = std::max(worst, b);
    c += s;
  }
  return sum + (double(st.size()) - 1) * worst;
}

TEST(HpipePlan, TokenSlicingBeatsEveryUniformSlicing) {
  const ModelProfile p = tiny_profile(8);
  const ClusterSpec cl = cluster({0.5, 0.5, 1.0, 1.0});
  PlanOptions opt;
  opt.max_candidates = 100000;  // every candidate: the DP is then exact on the grid
  const PipelinePlan hp = make_plan(p, cl, "c", 1024, "hpipe", opt);
  const std::vector<int> slices(hp.slices.begin(), hp.slices.end());
  const std::vector<StagePlan> stages = layer_stages(hp).stages;
  int sum = 0;
  for (size_t i = 0; i < slices.size(); ++i) {
    sum += slices[i];
    if (i + 1 < slices.size()) EXPECT_EQ(slices[i] % 8, 0);
  }
  EXPECT_EQ(sum, 1024);
  EXPECT_GT(slices.size(), 1u);
  EXPECT_GE(slices.front(), slices.back());  // later tokens cost more: shorter slices
  const double dp = slicing_objective(p, cl, stages, slices);
  for (int k : {1, 2, 4, 8, 16, 32, 64, 128}) {
    EXPECT_LE(dp, slicing_objective(p, cl, stages, uniform_slices(1024, k)) * (1 + 1e-12)) << k;
  }
}

TEST(HpipePlan, EverySystemPlansAndRoundTrips) {
  const ModelProfile p = tiny_profile(32);  // fine enough for DP 1 to beat the even split
  const ClusterSpec cl = cluster({0.4, 0.4, 0.4, 0.4, 1.0, 1.0});
  PlanOptions opt;
  opt.batch = 6;
  std::map<std::string, double> latency;
  for (const std::string sys :
       {"hpipe", "gpipe", "gp-b", "terapipe", "base", "uniform-1", "uniform-16", "uniform-128"}) {
    const PipelinePlan plan = make_plan(p, cl, "six", 2048, sys, opt);
    const nlohmann::json j = plan.to_json();
    EXPECT_EQ(j["version"], 1);
    EXPECT_EQ(j["stages"].size(), 6u);
    EXPECT_EQ(j["stages"][0]["stage"]["kind"], "llm.layers");
    EXPECT_TRUE(j["stages"][0]["stage"]["embed"].get<bool>());
    EXPECT_TRUE(j["stages"][5]["stage"]["head"].get<bool>());
    const PipelinePlan back = PipelinePlan::from_json(j);
    EXPECT_EQ(back.slices, plan.slices);
    EXPECT_EQ(read_back(j).cuts(), layer_stages(plan).cuts());
    EXPECT_EQ(j["cuts"], nlohmann::json(layer_stages(plan).cuts()));
    EXPECT_EQ(back.micro_batches, plan.micro_batches);
    EXPECT_EQ(back.batch, 6);
    EXPECT_DOUBLE_EQ(back.predicted.latency_s, plan.predicted.latency_s);
    EXPECT_EQ(back.to_json(), j);  // the one plan type round-trips whole
    EXPECT_EQ(plan.predicted.unit, "tokens");
    EXPECT_GT(plan.predicted.throughput_per_s, 0);
    EXPECT_GT(plan.predicted.energy_j, 0);
    latency[sys] = plan.predicted.latency_s;
  }
  EXPECT_LT(latency["hpipe"], latency["gpipe"]);
  EXPECT_LT(latency["gpipe"], latency["base"]);
  EXPECT_LE(latency["gp-b"], latency["gpipe"]);
  EXPECT_LE(latency["hpipe"], latency["terapipe"]);
}

TEST(HpipePlan, MalformedPlansAndBadRequestsAreRefused) {
  const ModelProfile p = tiny_profile(8);
  const ClusterSpec cl = cluster({1.0, 1.0});
  const nlohmann::json good = make_plan(p, cl, "c", 256, "hpipe", {}).to_json();
  nlohmann::json j = good;
  j["slices"].push_back(3);
  EXPECT_THROW(read_back(j), ParseError);
  j = good;
  j["stages"][1]["stage"]["first_layer"] = 1 + j["stages"][1]["stage"]["first_layer"].get<int>();
  EXPECT_THROW(read_back(j), ParseError);
  j = good;
  j["stages"][0]["stage"]["kind"] = "cnn.tile";
  EXPECT_THROW(read_back(j), ParseError);
  j = good;
  j.erase("prompt_len");
  EXPECT_THROW(read_back(j), ParseError);
  j = good;
  j["cuts"][1] = 0;
  EXPECT_THROW(read_back(j), ParseError);
  j = good;
  j["batch"] = 5000;  // past kMaxBatch
  EXPECT_THROW(read_back(j), ParseError);
  j = good;  // a group stage is not an HPipe stage
  j["stages"][0]["devices"] = {{{"device", "d0"}}, {{"device", "d9"}}};
  j["stages"][0].erase("device");
  EXPECT_THROW(read_back(j), ParseError);
  EXPECT_THROW(read_back(nlohmann::json::array()), ParseError);
  EXPECT_THROW(make_plan(p, cl, "c", 256, "pipedream", {}), InvalidArgument);
  EXPECT_THROW(make_plan(p, cl, "c", 256, "uniform-0", {}), InvalidArgument);
  EXPECT_THROW(make_plan(p, cl, "c", 256, "uniform-129", {}), InvalidArgument);
  EXPECT_THROW(make_plan(p, cl, "c", 0, "hpipe", {}), InvalidArgument);
  EXPECT_THROW(make_plan(tiny_profile(1), cl, "c", 256, "hpipe", {}), InvalidArgument);
}

// A cluster (built in code; files are range-checked) whose link latency overflows every slicing's
// predicted time: Infeasible saying why, not an internal check failure (issue 24).
TEST(HpipePlan, AClusterWithNoFiniteScheduleIsInfeasibleInTheUsersTerms) {
  ClusterSpec cl = cluster({1.0, 1.0});
  cl.links[0].latency_s = 1e308;
  try {
    make_plan(tiny_profile(4), cl, "c", 64, "hpipe", {});
    ADD_FAILURE() << "a plan was made";
  } catch (const Infeasible& e) {
    EXPECT_NE(std::string(e.what()).find("has a finite predicted latency on this cluster"),
              std::string::npos)
        << e.what();
  }
}

// HPipe and its baselines are found through the planner registry and plan exactly as make_plan.
TEST(HpipePlan, PlannerRegistryFindsHpipeAndItsBaselines) {
  const auto names = sched::planner_registry().names();
  for (const char* sys : {"hpipe", "gpipe", "gp-b", "terapipe", "base", "uniform"})
    EXPECT_NE(std::find(names.begin(), names.end(), sys), names.end()) << sys;
  const ModelProfile p = tiny_profile(8);
  const std::string path =
      (std::filesystem::temp_directory_path() / ("tandem_planner_" + std::to_string(getpid())))
          .string();
  p.save(path);
  const ClusterSpec cl = cluster({0.5, 1.0});
  sched::PlanRequest req{cl, "c", path, {{"prompt_len", 512}, {"batch", 2}}};
  EXPECT_EQ(sched::make_plan("hpipe", req).to_json(),
            make_plan(p, cl, "c", 512, "hpipe", {.batch = 2}).to_json());
  req.options["k"] = 4;
  EXPECT_EQ(sched::make_plan("uniform", req).system, "uniform-4");
  EXPECT_EQ(sched::make_plan("uniform", req).slices, (std::vector<int64_t>{128, 128, 128, 128}));
  EXPECT_THROW(sched::make_plan("hpipe", req), ParseError);  // k is uniform's alone
  req.options = {{"prompt_len", 512}, {"granularty", 8}};
  EXPECT_THROW(sched::make_plan("hpipe", req), ParseError);  // a typo is named, not ignored
  EXPECT_EQ(sched::planner_registry().get("gpipe").domain, "llm");
  try {
    (void)sched::make_plan("pipedream", req);
    ADD_FAILURE() << "an unknown planner was found";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("registered: "), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// HPipe's layer fit is a core CostModel: a "decoder_layers" node costs what the planner charges a
// stage, the speed factor applied once (on_device_s), links as the core model prices them.
TEST(HpipePlan, LayerFitIsACoreCostModel) {
  const ModelProfile p = tiny_profile(8);
  const ClusterSpec cl = cluster({0.5, 1.0});
  const LayerCostModel cost(p);
  const CostModel& as_core = cost;
  const StagePlan st{cl.devices[0].name, 2, 6, false, true};
  const double want = stage_compute_s(p, cl.devices[0], st, 96, 512);
  EXPECT_EQ(as_core.predict_op_s(LayerCostModel::layers_node(4, true, 96, 512), cl.devices[0]),
            want);
  EXPECT_DOUBLE_EQ(
      as_core.predict_op_s(LayerCostModel::layers_node(4, true, 96, 512), cl.devices[1]) * 2, want);
  EXPECT_DOUBLE_EQ(want, on_device_s(4 * p.layer.predict_s(96, 512) + p.head_row_s, 0.5));
  EXPECT_DOUBLE_EQ(as_core.predict_transfer_s(1e6, cl.links[0]), cl.links[0].transfer_time_s(1e6));
  OpNode other = LayerCostModel::layers_node(1, false, 8, 0);
  other.kind = "gemm";
  EXPECT_THROW(as_core.predict_op_s(other, cl.devices[0]), InvalidArgument);
  other = LayerCostModel::layers_node(1, false, 8, 0);
  other.attrs.erase("tokens");
  EXPECT_THROW(as_core.predict_op_s(other, cl.devices[0]), InvalidArgument);
  DeviceProfile stopped = cl.devices[0];
  stopped.speed_factor = 0;
  EXPECT_THROW(cost.layers_s(1, false, 8, 0, stopped), InvalidArgument);
}

TEST(HpipePlan, ProfileJsonRoundTripsAndRejectsGarbage) {
  const ModelProfile p = tiny_profile(8);
  const ModelProfile q = ModelProfile::from_json(p.to_json());
  EXPECT_EQ(q.n_layers, 8);
  EXPECT_DOUBLE_EQ(q.layer.predict_s(100, 300), p.layer.predict_s(100, 300));
  EXPECT_GT(p.layer.predict_s(1024, 0), p.layer.predict_s(512, 0) * 2);  // attention pairs grow
  nlohmann::json j = p.to_json();
  j["layer"]["s_grid"] = {8, 4, 2};
  EXPECT_THROW(ModelProfile::from_json(j), ParseError);
  j = p.to_json();
  j["n_layers"] = -1;
  EXPECT_THROW(ModelProfile::from_json(j), ParseError);
  EXPECT_THROW(ModelProfile::from_json(nlohmann::json(3)), ParseError);
}

}  // namespace
}  // namespace tandem::llm::hpipe
