// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/dtype.h"

#include <array>

#include "tandem/core/error.h"

namespace tandem {

namespace {
constexpr std::array<std::string_view, kNumDTypes> kNames = {
    "f32", "f16", "bf16", "i8", "u8", "u4", "i32", "i64", "q8_0", "q4_0", "q4_1", "q4_k", "q6_k"};
}

int64_t dtype_row_bytes(DType t, int64_t n) {
  const int64_t block = dtype_block_size(t);
  if (n < 0 || n % block != 0)
    throw InvalidArgument(
        cat(n, " elements of ", dtype_name(t), " is not a multiple of its block size ", block));
  return n / block * dtype_block_bytes(t);
}

std::string_view dtype_name(DType t) {
  const auto i = static_cast<size_t>(t);
  return i < kNames.size() ? kNames[i] : std::string_view("invalid");
}

DType parse_dtype(std::string_view name) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == name) return static_cast<DType>(i);
  throw InvalidArgument(cat("unknown dtype '", name,
                            "' (expected f32, f16, bf16, i8, u8, u4, i32, i64, q8_0, "
                            "q4_0, q4_1, q4_k or q6_k)"));
}

}  // namespace tandem
