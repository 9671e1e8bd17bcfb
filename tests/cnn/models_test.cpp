// SPDX-License-Identifier: Apache-2.0
// Whole-model outputs against ONNX Runtime, and the region check, on the committed tiny models
// (always) and on the generated real architectures (when scripts/cnn/gen_models.py has written
// them with --reference; skipped with the command to run otherwise).
#include <gtest/gtest.h>

#include <cstdio>

#include "cnn_test_util.h"
#include "reference_check.h"
#include "region_check.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn {
namespace {

using testing::check_against_reference;
using testing::kTinyTol;
using testing::load_reference;
using testing::scaled_max_error;

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

// The blocked pipeline (activations in nChw16c/nChw8c between ops) against the NCHW path: every
// tensor bit for bit, at 1 and 2 threads (the same oneDNN kernels and the same per-channel
// arithmetic in the engine's own kernels).
TEST(CnnModels, BlockedRunIsBitIdenticalToNchw) {
  for (const char* name : {"tiny_cnn", "tiny_resnet"}) {
    SCOPED_TRACE(name);
    const auto ref = load_reference(testing::data_dir(), name);
    for (bool fuse : {true, false}) {
      const Graph g = import_onnx(ref.model.string(), {.fuse = fuse});
      for (int threads : {1, 2}) {
        Executor blocked(g, {.threads = threads, .keep_all = true});
        Executor nchw(g, {.threads = threads, .keep_all = true, .blocked = false});
        blocked.run({ref.input});
        nchw.run({ref.input});
        for (size_t t = 0; t < g.tensors().size(); ++t) {
          const Tensor& a = blocked.tensors()[t];
          const Tensor& b = nchw.tensors()[t];
          ASSERT_TRUE(a.defined() && b.defined()) << g.tensor(static_cast<int>(t)).name;
          EXPECT_TRUE(testing::bit_equal(a, b))
              << "tensor '" << g.tensor(static_cast<int>(t)).name << "' (fuse " << fuse
              << ", threads " << threads << "): scaled error " << scaled_max_error(a, b);
        }
      }
    }
  }
}

// Winograd (opt-in) changes the rounding only: the tiny models' outputs stay within 1e-5 (scaled)
// of the direct convolutions and of ONNX Runtime's within the tiny tolerance.
TEST(CnnModels, WinogradMatchesDirectConvolution) {
  for (const char* name : {"tiny_cnn", "tiny_resnet"}) {
    SCOPED_TRACE(name);
    const auto ref = load_reference(testing::data_dir(), name);
    const Graph g = import_onnx(ref.model.string());
    for (int threads : {1, 2}) {
      Executor wino(g, {.threads = threads, .winograd = true});
      Executor direct(g, {.threads = threads, .winograd = false});
      const auto a = wino.run({ref.input}), b = direct.run({ref.input});
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(scaled_max_error(a[i], b[i]), 1e-5);
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_LE(scaled_max_error(a[i], ref.outputs[i]), kTinyTol);
    }
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

}  // namespace
}  // namespace tandem::cnn
