// SPDX-License-Identifier: Apache-2.0
// CUDA allocator accounting and copies (host <-> device, device <-> device, synchronous and on
// streams). These need a GPU: they skip with the reason where none is usable (TANDEM_REQUIRE_GPU=1
// makes that fail).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "common/gpu.h"
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/tensor.h"

namespace tandem {
namespace {

Backend& cuda_backend() { return *BackendRegistry::global().find(DeviceType::kCuda); }

Tensor iota_f32(int64_t n, float start = 0.5f) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return Tensor::from_vector(v, Shape{n}, DType::kF32);
}

std::vector<float> floats(const Tensor& host) {
  const float* p = host.data<float>();
  return {p, p + host.numel()};
}

TEST(CudaMemory, DeviceInfoDescribesTheGpu) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const DeviceInfo info = cuda_backend().device_info(0);
  EXPECT_EQ(info.device, Device::cuda(0));
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_GT(info.compute_units, 0);
  EXPECT_EQ(info.features.rfind("sm_", 0), 0u) << info.features;
  EXPECT_NE(info.features.find(", driver "), std::string::npos) << info.features;
  EXPECT_NE(info.features.find(", runtime "), std::string::npos) << info.features;
}

TEST(CudaMemory, AllocatorCountsBytes) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  Allocator& a = allocator(Device::cuda(0));
  EXPECT_EQ(a.device(), Device::cuda(0));
  a.reset_peak();
  const MemoryStats before = a.stats();
  constexpr int64_t kBytes = 3 << 20;
  {
    Tensor t = Tensor::empty({kBytes / 4}, DType::kF32, Device::cuda(0));
    const MemoryStats during = a.stats();
    EXPECT_EQ(during.current_bytes, before.current_bytes + kBytes);
    EXPECT_GE(during.peak_bytes, before.current_bytes + kBytes);
    EXPECT_EQ(during.num_allocs, before.num_allocs + 1);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes + kBytes);
  }
  const MemoryStats after = a.stats();
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.num_frees, before.num_frees + 1);
  EXPECT_GE(after.peak_bytes, before.current_bytes + kBytes);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, after.current_bytes);
  // CPU accounting is separate.
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes >= 0, true);
}

TEST(CudaMemory, ImpossibleAllocationThrowsOutOfMemory) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  Allocator& a = allocator(Device::cuda(0));
  const MemoryStats before = a.stats();
  EXPECT_THROW(a.allocate(size_t{1} << 52), OutOfMemory);
  EXPECT_EQ(a.stats().current_bytes, before.current_bytes);
  // The device is still usable afterwards.
  Tensor t = iota_f32(16).to(Device::cuda(0));
  EXPECT_EQ(t.to_float_vector(), floats(iota_f32(16)));
}

TEST(CudaMemory, HostDeviceRoundTripSynchronous) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const Tensor host = iota_f32(1000);
  const Tensor dev = host.to(Device::cuda(0));
  EXPECT_EQ(dev.device(), Device::cuda(0));
  const Tensor back = dev.to(Device::cpu());
  EXPECT_EQ(floats(back), floats(host));
  // Block-quantized bytes travel unchanged.
  std::vector<uint8_t> bytes(2 * 20);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  Tensor q = Tensor::empty({2, 32}, DType::kQ4_1);
  std::memcpy(q.raw_data(), bytes.data(), bytes.size());
  const Tensor q_back = q.to(Device::cuda(0)).to(Device::cpu());
  EXPECT_EQ(std::memcmp(q_back.raw_data(), bytes.data(), bytes.size()), 0);
}

TEST(CudaMemory, DeviceToDeviceAndStridedClone) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const Tensor host = iota_f32(24).reshape({4, 6});
  const Tensor dev = host.to(Device::cuda(0));
  Tensor copy = Tensor::empty({4, 6}, DType::kF32, Device::cuda(0));
  copy.copy_from(dev);
  EXPECT_EQ(copy.to_float_vector(), floats(host));
  // A transposed (strided) device view made contiguous on the device.
  const Tensor t = dev.transpose(0, 1).contiguous();
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.to_float_vector(), floats(host.transpose(0, 1).contiguous()));
  if (cuda_backend().device_count() > 1) {
    const Tensor other = dev.to(Device::cuda(1));
    EXPECT_EQ(other.device(), Device::cuda(1));
    EXPECT_EQ(other.to(Device::cuda(0)).to_float_vector(), floats(host));
  }
}

TEST(CudaMemory, CopiesOrderedOnStreams) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  auto s = create_stream(Device::cuda(0));
  ASSERT_NE(s->native_handle(), nullptr);
  Tensor back = Tensor::zeros({4096}, DType::kF32);
  {
    // Every intermediate is dropped before the stream runs: the stream keeps them alive.
    const Tensor host = iota_f32(4096, -7.0f);
    Tensor a = host.to(Device::cuda(0), s.get());
    Tensor b = Tensor::empty({4096}, DType::kF32, Device::cuda(0));
    b.copy_from(a, s.get());
    back.copy_from(b, s.get());
  }
  s->synchronize();
  EXPECT_EQ(floats(back), floats(iota_f32(4096, -7.0f)));
  // A copy ordered on a CPU stream runs when that stream reaches it.
  auto cpu = create_stream(Device::cpu());
  const Tensor dev = iota_f32(64, 3.0f).to(Device::cuda(0));
  Tensor out = Tensor::zeros({64}, DType::kF32);
  out.copy_from(dev, cpu.get());
  cpu->synchronize();
  EXPECT_EQ(floats(out), floats(iota_f32(64, 3.0f)));
}

}  // namespace
}  // namespace tandem
