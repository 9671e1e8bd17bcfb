// SPDX-License-Identifier: Apache-2.0
// CUDA streams and events: ordering of host functions and copies, waits between CUDA streams and
// across the CPU/CUDA boundary (both directions), errors of host functions re-thrown by
// synchronize(), tensors kept alive by queued work, and ops on streams. No timing is asserted:
// every ordering check holds work back behind a gate that the test opens itself.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <vector>

#include "common/gpu.h"
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

// A CPU stream blocked until open() and a CPU event recorded behind the block.
struct CpuGate {
  std::unique_ptr<Stream> stream = create_stream(Device::cpu());
  std::unique_ptr<Event> event = create_event(Device::cpu());
  std::promise<void> promise;
  CpuGate() {
    auto fut = promise.get_future().share();
    stream->launch([fut] { fut.wait(); });
    stream->record(*event);
  }
  void open() { promise.set_value(); }
};

Tensor filled(int64_t n, float v) {
  return Tensor::from_vector(std::vector<float>(n, v), Shape{n}, DType::kF32);
}

TEST(CudaStream, HostFunctionsRunInOrder) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  EXPECT_EQ(s->device(), Device::cuda(0));
  std::vector<int> order;
  for (int i = 0; i < 50; ++i) s->launch([&order, i] { order.push_back(i); });
  s->synchronize();
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[i], i);
}

TEST(CudaStream, CopyCompletesBeforeLaterHostFunction) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  const Tensor dev = filled(1 << 16, 2.5f).to(Device::cuda(0));
  Tensor host = Tensor::zeros({1 << 16}, DType::kF32);
  host.copy_from(dev, s.get());
  std::atomic<int> bad{-1};
  s->launch([&] {
    int n = 0;
    for (int64_t i = 0; i < host.numel(); ++i) n += host.data<float>()[i] != 2.5f;
    bad = n;
  });
  s->synchronize();
  EXPECT_EQ(bad.load(), 0);
}

TEST(CudaStream, WaitsOnCpuEventAndCudaEvent) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  CpuGate gate;
  auto s1 = create_stream(Device::cuda(0));
  auto s2 = create_stream(Device::cuda(0));
  auto e1 = create_event(Device::cuda(0));
  EXPECT_TRUE(e1->query());  // never recorded
  std::atomic<int> step{0};
  s1->wait(*gate.event);  // CUDA stream behind a CPU event
  s1->launch([&] { step = step * 10 + 1; });
  s1->record(*e1);
  s2->wait(*e1);  // CUDA stream behind a CUDA event
  s2->launch([&] { step = step * 10 + 2; });
  EXPECT_FALSE(e1->query());  // the gate holds everything back
  EXPECT_EQ(step.load(), 0);
  gate.open();
  s2->synchronize();
  EXPECT_EQ(step.load(), 12);
  e1->synchronize();
  EXPECT_TRUE(e1->query());
  gate.stream->synchronize();
}

TEST(CudaStream, CpuStreamWaitsOnCudaEvent) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  auto e = create_event(Device::cuda(0));
  auto cpu = create_stream(Device::cpu());
  std::promise<void> release;
  auto fut = release.get_future().share();
  std::atomic<int> step{0};
  s->launch([fut, &step] {
    fut.wait();
    step = 1;
  });
  s->record(*e);
  cpu->wait(*e);
  cpu->launch([&step] { step = step == 1 ? 2 : -1; });
  EXPECT_FALSE(e->query());
  release.set_value();
  cpu->synchronize();
  EXPECT_EQ(step.load(), 2);
  s->synchronize();
}

TEST(CudaStream, HostFunctionErrorsAreRethrownOnce) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  std::atomic<bool> later_ran{false};
  s->launch([] { throw std::runtime_error("first failure"); });
  s->launch([] { throw std::runtime_error("second failure"); });
  s->launch([&] { later_ran = true; });
  try {
    s->synchronize();
    ADD_FAILURE() << "synchronize() did not re-throw";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "first failure");
  }
  EXPECT_TRUE(later_ran.load());
  EXPECT_NO_THROW(s->synchronize());
}

TEST(CudaStream, CudaCallsInsideHostFunctionsAreRejected) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  s->launch([] { Tensor::empty({16}, DType::kF32, Device::cuda(0)); });
  EXPECT_THROW(s->synchronize(), DeviceError);
}

TEST(CudaStream, QueuedWorkKeepsTensorsAlive) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  Allocator& a = allocator(Device::cuda(0));
  auto s = create_stream(Device::cuda(0));
  {
    // Launch the kernels once before the stream is gated: with lazy module loading (the CUDA
    // default) the first launch of a kernel loads it, which may synchronize the context, i.e. wait
    // for the gated stream, which waits for this thread to open the gate: a deadlock (this test
    // hung on an H200 without this warm-up).
    const Tensor w = filled(1024, 1.0f).to(Device::cuda(0));
    Tensor w2 = Tensor::empty({1024}, DType::kF32, Device::cuda(0));
    ops::unary(ops::UnaryOp::kRelu, w, w2, s.get());
    ops::add(w2, w, w2, s.get());
    s->synchronize();
  }
  CpuGate gate;
  // The result stays on the device: a copy into pageable host memory would block this thread until
  // the gated stream reached it.
  Tensor result = Tensor::zeros({1024}, DType::kF32, Device::cuda(0));
  const int64_t base = a.stats().current_bytes;
  {
    Tensor x = filled(1024, -3.0f).to(Device::cuda(0));
    Tensor y = Tensor::empty({1024}, DType::kF32, Device::cuda(0));
    // A host function owning a device tensor: destroyed after it ran, off the CUDA callback thread.
    Tensor captured = Tensor::empty({256}, DType::kF32, Device::cuda(0));
    s->wait(*gate.event);
    s->launch([captured] { (void)captured.numel(); });
    ops::unary(ops::UnaryOp::kRelu, x, y, s.get());
    ops::add(y, x, y, s.get());
    result.copy_from(y, s.get());
  }
  EXPECT_EQ(a.stats().current_bytes, base + 2 * 1024 * 4 + 256 * 4);  // held by the queued work
  gate.open();
  s->synchronize();
  EXPECT_EQ(a.stats().current_bytes, base);
  for (float v : result.to_float_vector()) ASSERT_EQ(v, -3.0f);  // relu(-3) + (-3)
  gate.stream->synchronize();
}

TEST(CudaStream, OpsOnStreamMatchSynchronousOps) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const Device gpu = Device::cuda(0);
  std::vector<float> av(16 * 40), bv(40 * 24);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i % 7) - 3.0f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = static_cast<float>(i % 5) * 0.25f;
  const Tensor a = Tensor::from_vector(av, {16, 40}, DType::kF32).to(gpu);
  const Tensor b = Tensor::from_vector(bv, {40, 24}, DType::kF32).to(gpu);
  Tensor c_sync = Tensor::empty({16, 24}, DType::kF32, gpu);
  Tensor c_async = Tensor::empty({16, 24}, DType::kF32, gpu);
  ops::gemm(a, b, c_sync);
  auto s = create_stream(gpu);
  ops::gemm(a, b, c_async, {}, s.get());
  s->synchronize();
  EXPECT_EQ(c_sync.to_float_vector(), c_async.to_float_vector());
  // Integer-valued inputs: the product is exact in f32.
  const auto c = c_sync.to_float_vector();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 24; ++j) {
      double ref = 0;
      for (int k = 0; k < 40; ++k) ref += static_cast<double>(av[i * 40 + k]) * bv[k * 24 + j];
      ASSERT_EQ(c[i * 24 + j], static_cast<float>(ref)) << i << "," << j;
    }
  }
  // Streams of another device or backend are refused.
  auto cpu = create_stream(Device::cpu());
  EXPECT_THROW(ops::gemm(a, b, c_async, {}, cpu.get()), InvalidArgument);
}

TEST(CudaStream, EmbeddingRejectsOutOfRangeIds) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const Device gpu = Device::cuda(0);
  const Tensor table = Tensor::zeros({8, 32}, DType::kF32, gpu);
  const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 8}, {2}, DType::kI32).to(gpu);
  Tensor out = Tensor::empty({2, 32}, DType::kF32, gpu);
  EXPECT_THROW(ops::embedding(table, ids, out), InvalidArgument);
  auto s = create_stream(gpu);
  EXPECT_THROW(ops::embedding(table, ids, out, s.get()), InvalidArgument);
  s->synchronize();
}

TEST(CudaStream, EventsBelongToOneDevice) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  auto cpu_event = create_event(Device::cpu());
  EXPECT_THROW(s->record(*cpu_event), InvalidArgument);
  if (BackendRegistry::global().find(DeviceType::kCuda)->device_count() > 1) {
    auto other = create_event(Device::cuda(1));
    EXPECT_THROW(s->record(*other), InvalidArgument);
    auto s1 = create_stream(Device::cuda(1));
    s1->record(*other);
    s->wait(*other);  // cross-device waits are allowed
    s->synchronize();
  }
}

}  // namespace
}  // namespace tandem
