// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tandem/core/error.h"

namespace tandem {
namespace {

TEST(DType, SizesOfBlockTypesMatchGguf) {
  EXPECT_EQ(dtype_row_bytes(DType::kF32, 10), 40);
  EXPECT_EQ(dtype_row_bytes(DType::kBF16, 3), 6);
  EXPECT_EQ(dtype_row_bytes(DType::kU4, 6), 3);
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 64), 68);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_0, 64), 36);
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_1, 576), 360);
  EXPECT_THROW(dtype_row_bytes(DType::kQ4_1, 33), InvalidArgument);
  EXPECT_THROW(dtype_row_bytes(DType::kU4, 3), InvalidArgument);
}

TEST(DType, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const auto t = static_cast<DType>(i);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  }
  EXPECT_THROW(parse_dtype("f64"), InvalidArgument);
}

TEST(DType, HalfExactValuesAndSpecials) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);  // largest finite half
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::nanf("")))));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);  // below half of the smallest: to zero
  EXPECT_EQ(f16_to_f32(0x8000), -0.0f);
  // Ties round to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
}

TEST(DType, HalfRoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto v = static_cast<uint16_t>(h);
    if ((v & 0x7c00) == 0x7c00 && (v & 0x3ff)) continue;  // nan payloads
    ASSERT_EQ(f32_to_f16(f16_to_f32(v)), v) << std::hex << h;
  }
}

TEST(DType, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: stays at 1 (even).
  EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

}  // namespace
}  // namespace tandem
