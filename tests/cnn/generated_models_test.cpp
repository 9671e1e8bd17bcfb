// SPDX-License-Identifier: Apache-2.0
// The real architectures written by scripts/cnn/gen_models.py --reference (ResNet-18/34/50,
// MobileNetV2, VGG-16, AlexNet, Inception V3, YOLOv5s, YOLOv2-tiny): outputs against ONNX Runtime
// and random row bands / rectangles against the whole-image run. Skipped, with the command to
// run, when the models have not been generated ($TANDEM_CNN_MODELS or <build>/cnn_models).
#include <gtest/gtest.h>

#include "reference_check.h"
#include "region_check.h"

namespace tandem::cnn {
namespace {

class GeneratedModel : public ::testing::TestWithParam<const char*> {};

TEST_P(GeneratedModel, MatchesOnnxRuntimeAndRegions) {
  const std::string name = GetParam();
  const auto dir = testing::models_dir();
  if (!std::filesystem::exists(dir / (name + ".json")))
    GTEST_SKIP() << name << " not generated in " << dir
                 << ": run python3 scripts/cnn/gen_models.py --out " << dir
                 << " --reference (pip: onnx onnxruntime numpy), or set TANDEM_CNN_MODELS";
  const auto ref = testing::load_reference(dir, name);
  testing::check_against_reference(ref, testing::kModelTol, 2);
  const Graph g = import_onnx(ref.model.string());
  EXPECT_EQ(testing::check_random_regions(g, ref.input, 2, 11, 2), 2);
}

INSTANTIATE_TEST_SUITE_P(Cnn, GeneratedModel,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "mobilenet_v2",
                                           "vgg16", "alexnet", "inception_v3", "yolov5s",
                                           "yolov2_tiny"));

}  // namespace
}  // namespace tandem::cnn
