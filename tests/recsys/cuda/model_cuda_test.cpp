// SPDX-License-Identifier: Apache-2.0
// The recommender models on cuda:0 (label cuda; skipped without a usable GPU, TANDEM_REQUIRE_GPU=1
// makes that a failure): every tiny zoo model, each table dtype, gives the CPU scores; under
// concurrent load over a DeviceExecutor every policy returns the sequential GPU scores.
#include "../device_common.h"
#include "../device_serving_common.h"
#include "common/gpu.h"

namespace tandem::rec::testing {
namespace {

TEST(CudaRecModel, TinyZooModelsMatchCpuScores) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  expect_device_matches_cpu(Device::cuda(0), false);
}

TEST(CudaRecExecutor, ConcurrentLoadReturnsSequentialScores) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  for (const char* model : {"tiny-dlrm", "tiny-dlrm-cat", "tiny-wnd", "tiny-din", "tiny-bst"})
    check_device_policies(model, Device::cuda(0), false, 8);
}

}  // namespace
}  // namespace tandem::rec::testing
