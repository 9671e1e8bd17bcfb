// SPDX-License-Identifier: Apache-2.0
// The edge planners on the paper's models and testbed (configs/clusters/pico-8.json, pico-4.json):
// every system plans every model, PICO's predicted period is at most that of LW, EFL, OFL and one
// device, and the plan's FLOPs add up. Models come from scripts/cnn/gen_models.py; a test skips
// with the command when its model is absent. No timings are asserted.
#include <gtest/gtest.h>

#include <filesystem>

#include "cnn_test_util.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn::edge {
namespace {

class EdgeModels : public ::testing::TestWithParam<const char*> {};

TEST_P(EdgeModels, PicoIsAheadOfTheOneStageBaselines) {
  const std::string name = GetParam();
  const std::filesystem::path model = cnn::testing::models_dir() / (name + ".onnx");
  if (!std::filesystem::exists(model))
    GTEST_SKIP() << model << " absent: python3 scripts/cnn/gen_models.py --out "
                 << cnn::testing::models_dir() << " --models " << name;
  const Graph g = import_onnx(model.string());
  const Chain chain = linearise(g);
  const AnalyticCostModel cost;
  for (const char* testbed : {"pico-8.json", "pico-4.json"}) {
    SCOPED_TRACE(name + " on " + testbed);
    const ClusterSpec cl = ClusterSpec::from_json_file(
        (std::filesystem::path(TANDEM_CLUSTERS_DIR) / testbed).string());
    const EdgeProblem pb = make_problem(chain, cl, cost);
    const EdgePlan pico = plan_pico(pb, {.lambda = 0.5});
    for (const char* sys : {"lw", "efl", "ofl", "single"}) {
      const EdgePlan other = plan_system(sys, pb, {.lambda = 0.5});
      EXPECT_LE(pico.metrics.period_s, other.metrics.period_s) << sys;
    }
    const EdgePlan pipeedge = plan_pipeedge(pb);  // reported, not ordered (see the report)
    EXPECT_GT(pipeedge.metrics.period_s, 0);
    double flops = 0;
    for (const DeviceMetrics& d : pico.metrics.devices) flops += d.flops;
    EXPECT_NEAR(flops / chain.useful_flops() - 1, pico.metrics.redundancy, 1e-9);
    EXPECT_GE(pico.metrics.redundancy, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Paper, EdgeModels,
                         ::testing::Values("vgg16", "yolov2", "resnet34", "inception_v3",
                                           "mobilenet_v2"));

}  // namespace
}  // namespace tandem::cnn::edge
