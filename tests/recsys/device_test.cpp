// SPDX-License-Identifier: Apache-2.0
// The device path of the recommender models (RecModel::to) run on the CPU backend's ops: the same
// node code a GPU runs (embedding bags through ops::embedding_bag, MLPs, concatenation, the dot
// interaction, attention, the softmax sigmoid) must give the CPU nodes' scores; and the
// DeviceExecutor over CPU streams.
#include <atomic>
#include <chrono>
#include <thread>

#include "device_common.h"
#include "device_serving_common.h"
#include "tandem/core/error.h"

namespace tandem::rec::testing {
namespace {

TEST(RecDevicePath, OpsPathOnCpuMatchesCpuNodes) { expect_device_matches_cpu(Device::cpu(), true); }

TEST(RecDevicePath, PlainCpuDeviceKeepsTheCpuNodes) {
  RecModel m = RecModel::generate(zoo_config("tiny-dlrm"));
  m.set_cache_rows(8);
  m.to(Device::cpu());
  QueryFactory f(m.config(), {});
  const QueryInputs q = f.make(1, 6);
  m.forward(q);
  // The hot-row cache serves CPU lookups only: it saw this query's lookups.
  int64_t accesses = 0;
  for (const CacheStats& s : m.cache_stats()) accesses += s.hits + s.misses;
  EXPECT_GT(accesses, 0);
}

// The DeviceExecutor's issue queues, device streams and events, with CPU streams standing in for
// the device's.
TEST(RecDevicePath, DeviceExecutorOnCpuReturnsSequentialScoresUnderLoad) {
  for (const char* model : {"tiny-dlrm", "tiny-bst"})
    check_device_policies(model, Device::cpu(), true, 6);
}

TEST(RecDevicePath, DeviceExecutorEventsOrderStreams) {
  DeviceExecutor ex(Device::cpu(), test_cpu_profile());
  const int a = ex.create_stream(), b = ex.create_stream();
  auto e = ex.create_event();
  std::atomic<int> step{0};
  int seen_by_b = -1;
  ex.host(a, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    step = 1;
  });
  ex.record(*e, a);
  ex.wait(b, *e);
  ex.host(b, [&] { seen_by_b = step.load(); });
  ex.synchronize();
  EXPECT_EQ(seen_by_b, 1);
  EXPECT_TRUE(ex.done(*e));
  EXPECT_THROW(ex.launch(7, {}), InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec::testing
