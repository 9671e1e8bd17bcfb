// SPDX-License-Identifier: Apache-2.0
// GPU tests skip where no usable CUDA device exists; TANDEM_REQUIRE_GPU=1 turns those skips into
// failures (for runs on a GPU machine, where a broken driver must not pass as green).
//
//   TEST(Cuda, Gemm) { TANDEM_REQUIRE_CUDA_OR_SKIP(); ... }
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "tandem/core/backend.h"

namespace tandem::testing {

// True when cuda:0 is usable; otherwise `why` says why not.
inline bool gpu_available(std::string* why) {
  auto& reg = BackendRegistry::global();
  Backend* b = reg.find(DeviceType::kCuda);
  if (!b) {
    std::string msg = "CUDA backend not loaded";
    for (auto& e : reg.load_errors()) msg += ": " + e;
    if (reg.load_errors().empty())
      msg += " (built with TANDEM_CUDA=OFF, or libtandem_cuda.so not found)";
    *why = msg;
    return false;
  }
  if (b->device_count() == 0) {
    *why = b->unavailable_reason();
    return false;
  }
  return true;
}

inline bool gpu_required() {
  const char* env = std::getenv("TANDEM_REQUIRE_GPU");
  return env && std::string(env) == "1";
}

}  // namespace tandem::testing

#define TANDEM_REQUIRE_CUDA_OR_SKIP()                                                           \
  do {                                                                                          \
    std::string tandem_why_;                                                                    \
    if (!::tandem::testing::gpu_available(&tandem_why_)) {                                      \
      if (::tandem::testing::gpu_required()) FAIL() << "TANDEM_REQUIRE_GPU=1: " << tandem_why_; \
      GTEST_SKIP() << tandem_why_;                                                              \
    }                                                                                           \
  } while (0)
