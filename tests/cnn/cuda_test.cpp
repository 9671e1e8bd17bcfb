// SPDX-License-Identifier: Apache-2.0
// The CNN engine on CUDA (cuDNN/cuBLAS runner of libtandem_cuda.so) against the CPU executor:
// the committed tiny models (every supported op; batch 2) and, when generated, ResNet-50 and
// MobileNetV2. Skips with the reason where no usable CUDA device exists (TANDEM_REQUIRE_GPU=1
// makes that a failure). Tolerance: scaled max error (cnn_test_util.h) <= 1e-4 for the tiny
// models and 1e-3 for the real ones (FP32 math on both sides, TF32 off; the sums run in a
// different order).
#include <gtest/gtest.h>

#include <filesystem>

#include "cnn_test_util.h"
#include "common/gpu.h"
#include "reference_check.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn {
namespace {

void compare_with_cpu(const Graph& g, const Tensor& input, double tol) {
  Executor cpu(g, {.threads = 2});
  Executor gpu(g, {.device = Device::cuda(0)});
  const auto want = cpu.run({input});
  const auto got = gpu.run({input});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].shape(), want[i].shape());
    EXPECT_TRUE(got[i].device().is_cpu());
    const double err = testing::scaled_max_error(got[i], want[i]);
    std::fprintf(stderr, "output %zu: scaled max error cuda vs cpu = %.3g\n", i, err);
    EXPECT_LE(err, tol) << "output " << i;
  }
  const auto again = gpu.run({input});  // the plan is reused
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::bit_equal(again[i], got[i]));
}

TEST(CnnCuda, TinyModelsMatchTheCpuExecutor) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  for (const char* name : {"tiny_cnn", "tiny_resnet"}) {
    SCOPED_TRACE(name);
    const auto ref = testing::load_reference(testing::data_dir(), name);
    compare_with_cpu(import_onnx(ref.model.string()), ref.input, 1e-4);
    compare_with_cpu(import_onnx(ref.model.string(), {.fuse = false}), ref.input, 1e-4);
  }
}

TEST(CnnCuda, GeneratedModelsMatchTheCpuExecutor) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  int ran = 0;
  for (const char* name : {"resnet50", "mobilenet_v2"}) {
    const std::filesystem::path p =
        std::filesystem::path(TANDEM_CNN_MODELS_DIR) / (std::string(name) + ".onnx");
    if (!std::filesystem::exists(p)) continue;
    SCOPED_TRACE(name);
    const Graph g = import_onnx(p.string());
    Tensor x = Tensor::empty(g.tensor(g.inputs()[0]).shape, DType::kF32);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 97) / 97.0f;
    compare_with_cpu(g, x, 1e-3);
    ++ran;
  }
  if (ran == 0)
    GTEST_SKIP() << "no generated models: python3 scripts/cnn/gen_models.py --out "
                 << TANDEM_CNN_MODELS_DIR << " --models resnet50,mobilenet_v2";
}

TEST(CnnCuda, TilesAreCpuOnly) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const auto ref = testing::load_reference(testing::data_dir(), "tiny_cnn");
  const Graph g = import_onnx(ref.model.string());
  Executor gpu(g, {.device = Device::cuda(0)});
  EXPECT_THROW(gpu.run_region(all_nodes(g), {}, {}), Unsupported);
  EXPECT_THROW(Executor(g, {.keep_all = true, .device = Device::cuda(0)}), Unsupported);
}

}  // namespace
}  // namespace tandem::cnn
