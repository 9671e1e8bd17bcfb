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

// Every conv the executor runs with Winograd (Window::out_grid > 1 on its graph; YOLOv5s's with
// SiLU applied after the conv): grid-aligned row bands at every 8th row, 4 and 12 rows high,
// computed by run_region from their required input, equal the whole-image run bit for bit (the
// probe in conv.cpp drops Winograd where they would not, e.g. VGG-16's 256/512-channel convs).
class WinogradModel : public ::testing::TestWithParam<const char*> {};

TEST_P(WinogradModel, ConvBandsAreBitIdentical) {
  const std::string name = GetParam();
  const auto dir = testing::models_dir();
  if (!std::filesystem::exists(dir / (name + ".json")))
    GTEST_SKIP() << name << " not generated in " << dir;
  const auto ref = testing::load_reference(dir, name);
  const Graph g0 = import_onnx(ref.model.string());
  Executor full(g0, {.threads = 2, .keep_all = true});
  full.run({ref.input});
  const Graph& g = full.graph();
  Executor part(g0, {.threads = 2});
  int convs = 0;
  for (int id = 0; id < static_cast<int>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    if (n.op != OpKind::kConv || n.window.out_grid == 1) continue;
    ++convs;
    const int x = n.inputs[0], y = n.outputs[0];
    const Shape& s = g.tensor(y).shape;
    for (int64_t h0 = 0; h0 < s[2]; h0 += 8) {
      for (int64_t rows : {4, 12}) {
        const Region out{h0, std::min<int64_t>(s[2], h0 + rows), 0, s[3]};
        const auto need = required_regions(g, {id}, {{y, out}});
        const Tensor got =
            part.run_region({id},
                            {{x, {testing::crop_tensor(full.tensors()[x], need[x]), need[x]}}},
                            {{y, out}})
                .at(y)
                .data;
        ASSERT_TRUE(testing::bit_equal(got, testing::crop_tensor(full.tensors()[y], out)))
            << n.name << " " << s.to_string() << " rows " << out.to_string();
      }
    }
  }
  if (convs == 0) GTEST_SKIP() << "no Winograd conv here (" << full.node_impls()[0] << ")";
}

INSTANTIATE_TEST_SUITE_P(Cnn, GeneratedModel,
                         ::testing::Values("resnet18", "resnet34", "resnet50", "mobilenet_v2",
                                           "vgg16", "alexnet", "inception_v3", "yolov5s",
                                           "yolov2_tiny"));

INSTANTIATE_TEST_SUITE_P(Cnn, WinogradModel,
                         ::testing::Values("resnet50", "vgg16", "inception_v3", "yolov5s"));

}  // namespace
}  // namespace tandem::cnn
