// SPDX-License-Identifier: Apache-2.0
// DType: the element types tandem tensors hold, with sizes and scalar conversions.
//
// Plain types (f32, f16, bf16, i8, u8, i32, i64) have one element per item. Packed and block types
// store several elements per unit:
//   kU4    two unsigned 4-bit values per byte, low nibble first (KV-cache quantization codes).
//   kQ8_0  blocks of 32: f16 scale d, 32 x int8 q;               x = d * q            (34 bytes,
//   GGUF Q8_0) kQ4_0  blocks of 32: f16 scale d, 16 bytes of nibbles;       x = d * (q - 8) (18
//   bytes, GGUF Q4_0) kQ4_1  blocks of 32: f16 scale d, f16 min m, 16 bytes;       x = d * q + m
//   (20 bytes, GGUF Q4_1)
// In Q4 blocks element i (< 16) is the low nibble of byte i and element i + 16 the high nibble.
// K-quants (GGUF Q4_K, Q6_K) use super-blocks of 256 elements:
//   kQ4_K  f16 d, f16 dmin, 12 bytes of 6-bit (scale, min) pairs for 8 sub-blocks of 32, 128 bytes
//          of nibbles; x = d * scale_j * q - dmin * min_j                              (144 bytes)
//   kQ6_K  128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 sub-block scales (16
//          elements each), f16 d; x = d * scale_j * (q - 32)                          (210 bytes)
// They are weight formats only (read from GGUF files, dequantized on the fly): converting to them
// is Unsupported.
// Tensors of block types keep their last dimension contiguous and a multiple of the block size.
//
//   float h = tandem::f16_to_f32(tandem::f32_to_f16(1.5f));   // 1.5
//   size_t row = tandem::dtype_row_bytes(tandem::DType::kQ4_1, 576);  // 18 blocks * 20 bytes = 360
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "tandem/export.h"

namespace tandem {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kI8,
  kU8,
  kU4,
  kI32,
  kI64,
  kQ8_0,
  kQ4_0,
  kQ4_1,
  kQ4_K,
  kQ6_K
};

inline constexpr int kNumDTypes = 13;
inline constexpr int kQuantBlock = 32;    // elements per Q8_0 / Q4_0 / Q4_1 block
inline constexpr int kKQuantBlock = 256;  // elements per Q4_K / Q6_K super-block

// Elements per storage unit: 1 for plain types, 2 for kU4, 32 for the GGUF block types.
constexpr int64_t dtype_block_size(DType t) {
  switch (t) {
    case DType::kU4:
      return 2;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
      return kQuantBlock;
    case DType::kQ4_K:
    case DType::kQ6_K:
      return kKQuantBlock;
    default:
      return 1;
  }
}

// Bytes per storage unit.
constexpr int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
      return 2;
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kU8:
      return 1;
    case DType::kU4:
      return 1;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_1:
      return 20;
    case DType::kQ4_K:
      return 144;
    case DType::kQ6_K:
      return 210;
  }
  return 0;
}

constexpr bool dtype_is_blocked(DType t) { return dtype_block_size(t) > 1; }
constexpr bool dtype_is_float(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}
constexpr bool dtype_is_quantized(DType t) {
  return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1 || t == DType::kU4 ||
         t == DType::kQ4_K || t == DType::kQ6_K;
}
constexpr bool dtype_is_k_quant(DType t) { return t == DType::kQ4_K || t == DType::kQ6_K; }

// Bytes of n consecutive elements; throws InvalidArgument if n is not a multiple of the block size.
TANDEM_API int64_t dtype_row_bytes(DType t, int64_t n);
TANDEM_API std::string_view dtype_name(DType t);
// Parses "f32", "f16", "bf16", "i8", "u8", "u4", "i32", "i64", "q8_0", "q4_0", "q4_1", "q4_k",
// "q6_k"; throws
// InvalidArgument.
TANDEM_API DType parse_dtype(std::string_view name);

// IEEE half <-> float (round to nearest even), bfloat16 <-> float (round to nearest even, NaN
// kept).
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t h = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - ((127 - 15) << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

}  // namespace tandem
