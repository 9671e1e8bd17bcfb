// SPDX-License-Identifier: Apache-2.0
// Whole-model comparison against a reference run written by scripts/cnn/gen_models.py.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

#include "cnn_test_util.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"

namespace tandem::cnn::testing {

// Tolerance: max |ours - ORT| / max(1, max |ORT|). Summation order differs (oneDNN vs MLAS, BN
// folded by both). Measured: tiny models <= 4.2e-7; ResNets, MobileNetV2, VGG-16, AlexNet,
// Inception V3, YOLOv2-tiny <= 6.2e-6; YOLOv5s (deep SiLU stack, 80x80 sigmoid maps) <= 1.8e-4.
constexpr double kTinyTol = 1e-4;
constexpr double kModelTol = 1e-3;

inline void check_against_reference(const Reference& ref, double tol, int threads) {
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

}  // namespace tandem::cnn::testing
