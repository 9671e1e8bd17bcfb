// SPDX-License-Identifier: Apache-2.0
// Whole-model outputs against ONNX Runtime, and the region check, on the committed tiny models
// (always) and on the generated real architectures (when scripts/cnn/gen_models.py has written
// them with --reference; skipped with the command to run otherwise).
#include <gtest/gtest.h>

#include <cstdio>

#include "cnn_test_util.h"
#include "region_check.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn {
namespace {

using testing::load_reference;
using testing::scaled_max_error;

// Tolerance: max |ours - ORT| / max(1, max |ORT|). Summation order differs (oneDNN vs MLAS, BN
// folded by both); the tiny models stay well inside 1e-5, deep ones inside 1e-4 in practice.
constexpr double kTinyTol = 1e-4;
constexpr double kModelTol = 1e-3;

void check_against_reference(const testing::Reference& ref, double tol, int threads) {
  const Graph g = import_onnx(ref.model.string());
  Executor ex(g, {.threads = threads});
  const std::vector<Tensor> out = ex.run({ref.input});
  ASSERT_EQ(out.size(), ref.outputs.size());
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_EQ(out[i].shape(), ref.outputs[i].shape()) << "output " << i;
    const double err = scaled_max_error(out[i], ref.outputs[i]);
    std::fprintf(stderr, "%s output %zu: scaled max error vs %s = %.3g (threads %d)\n",
                 ref.model.filename().c_str(), i, ref.producer.c_str(), err, threads);
    EXPECT_LE(err, tol) << ref.model << " output " << i << " vs " << ref.producer << ", threads "
                        << threads;
  }
}

TEST(CnnModels, TinyCnnMatchesOnnxRuntime) {
  const auto ref = load_reference(testing::data_dir(), "tiny_cnn");
  check_against_reference(ref, kTinyTol, 1);
  check_against_reference(ref, kTinyTol, 2);
}

TEST(CnnModels, TinyResnetMatchesOnnxRuntime) {  // batch 2
  const auto ref = load_reference(testing::data_dir(), "tiny_resnet");
  check_against_reference(ref, kTinyTol, 1);
  check_against_reference(ref, kTinyTol, 2);
}

TEST(CnnModels, TinyUnfusedMatchesFused) {
  const auto ref = load_reference(testing::data_dir(), "tiny_cnn");
  const Graph fused = import_onnx(ref.model.string());
  const Graph plain = import_onnx(ref.model.string(), {.fuse = false});
  EXPECT_LT(fused.nodes().size(), plain.nodes().size());
  Executor a(fused), b(plain);
  const auto ya = a.run({ref.input}), yb = b.run({ref.input});
  for (size_t i = 0; i < ya.size(); ++i) EXPECT_LE(scaled_max_error(ya[i], yb[i]), kTinyTol);
}

TEST(CnnModels, TinyRegionsMatchTheFullRun) {
  for (const char* name : {"tiny_cnn", "tiny_resnet"}) {
    SCOPED_TRACE(name);
    const auto ref = load_reference(testing::data_dir(), name);
    const Graph g = import_onnx(ref.model.string());
    EXPECT_EQ(testing::check_random_regions(g, ref.input, 200, 7), 200);
    EXPECT_EQ(testing::check_random_regions(g, ref.input, 8, 9, 2), 8);
  }
}

TEST(CnnModels, RepeatedRunsReuseThePlan) {
  const auto ref = load_reference(testing::data_dir(), "tiny_resnet");
  const Graph g = import_onnx(ref.model.string());
  Executor ex(g);
  const auto y1 = ex.run({ref.input});
  const auto y2 = ex.run({ref.input});
  for (size_t i = 0; i < y1.size(); ++i) EXPECT_TRUE(testing::bit_equal(y1[i], y2[i]));
  EXPECT_LT(ex.memory_plan().planned_bytes, ex.memory_plan().naive_bytes);
  EXPECT_GT(ex.memory_plan().slots, 0);
}

class GeneratedModel : public ::testing::TestWithParam<const char*> {};

TEST_P(GeneratedModel, MatchesOnnxRuntimeAndRegions) {
  const std::string name = GetParam();
  const auto dir = testing::models_dir();
  if (!std::filesystem::exists(dir / (name + ".json")))
    GTEST_SKIP() << name << " not generated in " << dir
                 << ": run python3 scripts/cnn/gen_models.py --out " << dir
                 << " --reference (pip: onnx onnxruntime numpy), or set TANDEM_CNN_MODELS";
  const auto ref = load_reference(dir, name);
  check_against_reference(ref, kModelTol, 2);
  const Graph g = import_onnx(ref.model.string());
  EXPECT_GT(testing::check_random_regions(g, ref.input, 4, 11, 2), 0);
}

INSTANTIATE_TEST_SUITE_P(Cnn, GeneratedModel,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "mobilenet_v2",
                                           "vgg16", "alexnet", "inception_v3", "yolov5s",
                                           "yolov2_tiny"));

}  // namespace
}  // namespace tandem::cnn
