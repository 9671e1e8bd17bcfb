// SPDX-License-Identifier: Apache-2.0
// The edge-cloud planners on the generated models (YOLOv5s behind its virtual sink) and
// configs/clusters/edge-cloud.json across the bandwidth sweep: DECC's predicted delay is at most
// every baseline's, every plan's evaluator agrees with the discrete-event simulation, DSL's cut is
// at most Neurosurgeon's T_e + T_t + T_c, and DADS switches to DSH below 1.51 Mbps. A test skips
// with the command when its model is absent. No timings are asserted.
#include <gtest/gtest.h>

#include <filesystem>

#include "cnn_test_util.h"
#include "tandem/cnn/edge/chain.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"

namespace tandem::cnn::edge {
namespace {

class EdgeCloudModels : public ::testing::TestWithParam<const char*> {};

TEST_P(EdgeCloudModels, DeccIsNeverBehindABaseline) {
  const std::string name = GetParam();
  const std::filesystem::path model = cnn::testing::models_dir() / (name + ".onnx");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models " << name;
  const Graph g = load_edge_graph(model.string());
  const AnalyticCostModel cost;
  ClusterSpec cl = ClusterSpec::from_json_file(
      (std::filesystem::path(TANDEM_CLUSTERS_DIR) / "edge-cloud.json").string());
  for (double mbps : {0.5, 1.5, 5.0, 20.0, 100.0}) {
    SCOPED_TRACE(name + " at " + std::to_string(mbps) + " Mbps");
    cl.links[0].bandwidth_bytes_per_s = mbps * 1e6 / 8;
    const EdgeCloudProblem pb = make_edge_cloud_problem(g, cl, cost);
    const EdgeCloudPlan decc = plan_decc(pb);
    EXPECT_NEAR(simulate_schedule(decc, pb).makespan_s, decc.metrics.makespan_s, 1e-9);
    for (const std::string& s : edge_cloud_system_names()) {
      if (s == "decc") continue;
      const EdgeCloudPlan p = plan_edge_cloud(s, pb);
      EXPECT_LE(decc.metrics.makespan_s, p.metrics.makespan_s + 1e-12) << s;
      EXPECT_NEAR(simulate_schedule(p, pb).makespan_s, p.metrics.makespan_s, 1e-9) << s;
    }
    EXPECT_LE(plan_dads_dsl(pb).metrics.serial_s, plan_neurosurgeon(pb).metrics.serial_s + 1e-12);
    const EdgeCloudPlan dads = plan_dads(pb);
    const EdgeCloudPlan mode = mbps < 1.51 ? plan_dads_dsh(pb) : plan_dads_dsl(pb);
    EXPECT_EQ(dads.edge_nodes, mode.edge_nodes);
  }
}

INSTANTIATE_TEST_SUITE_P(Paper, EdgeCloudModels,
                         ::testing::Values("alexnet", "inception_v3", "resnet50", "mobilenet_v2",
                                           "yolov5s"));

}  // namespace
}  // namespace tandem::cnn::edge
