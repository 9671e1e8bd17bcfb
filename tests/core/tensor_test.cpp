// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/tensor.h"

#include <gtest/gtest.h>

#include <numeric>

#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"

namespace tandem {
namespace {

Tensor iota_f32(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  std::iota(v.begin(), v.end(), 0.0f);
  return Tensor::from_vector(v, s, DType::kF32);
}

TEST(Tensor, EmptyHasContiguousStridesAndBytes) {
  auto t = Tensor::empty({2, 3, 4}, DType::kF32);
  EXPECT_TRUE(t.defined());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_EQ(t.nbytes(), 96);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.to_string(), "Tensor(f32, [2, 3, 4], cpu)");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  EXPECT_EQ(Tensor::empty({2, 64}, DType::kQ4_1).nbytes(), 80);
  EXPECT_THROW(Tensor::empty({2, 48}, DType::kQ4_1), InvalidArgument);
  EXPECT_FALSE(Tensor().defined());
}

TEST(Tensor, ZerosAndFromVector) {
  auto z = Tensor::zeros({5}, DType::kI32);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(z.data<int32_t>()[i], 0);
  auto t = iota_f32({2, 2});
  EXPECT_EQ(t.data<float>()[3], 3.0f);
  EXPECT_THROW(Tensor::from_vector(std::vector<float>{1, 2, 3}, {2, 2}, DType::kF32),
               ContractError);
  EXPECT_THROW(t.data<uint16_t>(), ContractError);
}

TEST(Tensor, SliceSelectAndTransposeAreViews) {
  auto t = iota_f32({4, 5});
  auto rows = t.slice(0, 1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 5}));
  EXPECT_EQ(rows.buffer(), t.buffer());
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_EQ(rows.data<float>()[0], 5.0f);
  auto cols = t.slice(1, 2, 4);
  EXPECT_FALSE(cols.is_contiguous());
  auto c = cols.contiguous();
  EXPECT_NE(c.buffer(), t.buffer());
  EXPECT_EQ(c.to_float_vector(), (std::vector<float>{2, 3, 7, 8, 12, 13, 17, 18}));
  auto row2 = t.select(0, 2);
  EXPECT_EQ(row2.shape(), (Shape{5}));
  EXPECT_EQ(row2.data<float>()[1], 11.0f);
  auto tt = t.transpose(0, 1).contiguous();
  EXPECT_EQ(tt.shape(), (Shape{5, 4}));
  EXPECT_EQ(tt.data<float>()[1], 5.0f);  // tt[0][1] = t[1][0]
  EXPECT_THROW(t.slice(0, 3, 5), InvalidArgument);
  EXPECT_THROW(t.select(1, 5), InvalidArgument);
}

TEST(Tensor, PermuteAndReshape) {
  auto t = iota_f32({2, 3, 4});
  auto p = t.permute({2, 0, 1}).contiguous();  // [4, 2, 3]
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  // p[i][j][k] = t[j][k][i] = 12 j + 4 k + i
  auto v = p.to_float_vector();
  EXPECT_EQ(v[1 * 6 + 1 * 3 + 2], 12 + 8 + 1);
  auto r = t.reshape({6, -1});
  EXPECT_EQ(r.shape(), (Shape{6, 4}));
  EXPECT_EQ(r.buffer(), t.buffer());
  EXPECT_THROW(t.reshape({5, 5}), InvalidArgument);
  EXPECT_THROW(t.transpose(0, 1).reshape({6, 4}), InvalidArgument);
  EXPECT_THROW(t.permute({0, 0, 1}), InvalidArgument);
  auto u = t.unsqueeze(0);
  EXPECT_EQ(u.shape(), (Shape{1, 2, 3, 4}));
  EXPECT_TRUE(u.is_contiguous());
}

TEST(Tensor, CopyFromIntoStridedView) {
  auto dst = Tensor::zeros({3, 4}, DType::kF32);
  auto src = iota_f32({3, 2});
  auto view = dst.slice(1, 1, 3);
  view.copy_from(src);
  EXPECT_EQ(dst.to_float_vector(), (std::vector<float>{0, 0, 1, 0, 0, 2, 3, 0, 0, 4, 5, 0}));
  auto tview = dst.transpose(0, 1);  // [4, 3], strided innermost
  tview.copy_from(iota_f32({4, 3}));
  EXPECT_EQ(dst.data<float>()[1], 3.0f);  // dst[0][1] = tview[1][0] = 3
  EXPECT_THROW(view.copy_from(iota_f32({2, 3})), InvalidArgument);
}

TEST(Tensor, BlockQuantizedViewsRespectBlocks) {
  auto q = Tensor::zeros({4, 64}, DType::kQ8_0);
  auto rows = q.slice(0, 1, 3);
  EXPECT_EQ(static_cast<char*>(rows.raw_data()) - static_cast<char*>(q.raw_data()), 68);
  auto half = q.slice(1, 32, 64);
  EXPECT_EQ(static_cast<char*>(half.raw_data()) - static_cast<char*>(q.raw_data()), 34);
  EXPECT_THROW(q.slice(1, 16, 48), InvalidArgument);
  EXPECT_THROW(q.select(1, 3), InvalidArgument);
  auto c = rows.clone();
  EXPECT_EQ(c.nbytes(), 136);
}

TEST(Tensor, FromBlobKeepsOwnerAliveAndIsNotCounted) {
  auto before = memory_stats(Device::cpu()).current_bytes;
  auto owner = std::make_shared<std::vector<float>>(16, 2.0f);
  std::weak_ptr<std::vector<float>> weak = owner;
  {
    auto t = Tensor::from_blob(owner->data(), {4, 4}, DType::kF32, Device::cpu(), owner);
    owner.reset();
    EXPECT_FALSE(weak.expired());
    EXPECT_EQ(t.data<float>()[15], 2.0f);
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
  }
  EXPECT_TRUE(weak.expired());
}

TEST(Allocator, CountsCurrentAndPeakBytes) {
  auto& a = allocator(Device::cpu());
  const auto base = a.stats();
  a.reset_peak();
  {
    auto t1 = Tensor::empty({1024}, DType::kF32);
    auto t2 = Tensor::empty({256}, DType::kI64);
    const auto s = a.stats();
    EXPECT_EQ(s.current_bytes - base.current_bytes, 4096 + 2048);
    EXPECT_GE(s.peak_bytes - base.current_bytes, 4096 + 2048);
    EXPECT_EQ(s.num_allocs - base.num_allocs, 2);
  }
  const auto after = a.stats();
  EXPECT_EQ(after.current_bytes, base.current_bytes);
  EXPECT_EQ(after.num_frees - base.num_frees, 2);
  EXPECT_GE(after.peak_bytes, base.current_bytes + 6144);
  a.reset_peak();
  EXPECT_EQ(a.stats().peak_bytes, after.current_bytes);
  EXPECT_THROW(a.allocate(16, 3), InvalidArgument);
}

TEST(Allocator, HugeRequestThrowsOutOfMemory) {
  EXPECT_THROW(Tensor::empty({int64_t{1} << 50}, DType::kF32), OutOfMemory);
}

TEST(Registry, CpuAlwaysPresentAndUnknownDevicesAreNotFound) {
  auto& reg = BackendRegistry::global();
  auto devs = reg.devices();
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs.front(), Device::cpu());
  auto info = reg.get(Device::cpu()).device_info(0);
  EXPECT_GT(info.compute_units, 0);
  EXPECT_GT(info.memory_bytes, 0);
  EXPECT_FALSE(info.name.empty());
  EXPECT_THROW(reg.get(Device::cuda(57)), NotFound);
  EXPECT_THROW(Tensor::empty({4}, DType::kF32, Device::cuda(57)), NotFound);
  std::string err;
  EXPECT_FALSE(reg.load_module("/nonexistent/libtandem_nothing.so", &err));
  EXPECT_NE(err.find("/nonexistent/libtandem_nothing.so"), std::string::npos);
}

TEST(Registry, CpuThreadSetting) {
  const int old = cpu_num_threads();
  set_cpu_num_threads(1);
  EXPECT_EQ(cpu_num_threads(), 1);
  set_cpu_num_threads(old);
  EXPECT_THROW(set_cpu_num_threads(0), InvalidArgument);
}

}  // namespace
}  // namespace tandem
