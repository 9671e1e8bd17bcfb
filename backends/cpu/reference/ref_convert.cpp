// SPDX-License-Identifier: Apache-2.0
// Reference element decoding/encoding of every dtype, GGUF reference quantization, and convert
// (including the strided same-dtype copy that Tensor::clone()/contiguous() rely on).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "reference.h"
#include "tandem/core/error.h"

namespace tandem::cpu::ref {
namespace {

const uint8_t* bytes(const void* p) { return static_cast<const uint8_t*>(p); }

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void put_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

template <class T>
T load_as(const void* row, int64_t i) {
  T v;
  std::memcpy(&v, bytes(row) + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
  return v;
}

template <class T>
void store_as(void* row, int64_t i, T v) {
  std::memcpy(static_cast<uint8_t*>(row) + i * static_cast<int64_t>(sizeof(T)), &v, sizeof(T));
}

// Nibble j (0..31) of a 16-byte Q4 payload: element j < 16 is the low nibble of byte j, element j +
// 16 the high nibble of byte j.
int nibble(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4); }

bool is_integer(DType t) {
  return t == DType::kI8 || t == DType::kU8 || t == DType::kU4 || t == DType::kI32 ||
         t == DType::kI64;
}

void integer_range(DType t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case DType::kI8:
      *lo = -128, *hi = 127;
      return;
    case DType::kU8:
      *lo = 0, *hi = 255;
      return;
    case DType::kU4:
      *lo = 0, *hi = 15;
      return;
    case DType::kI32:
      *lo = std::numeric_limits<int32_t>::min(), *hi = std::numeric_limits<int32_t>::max();
      return;
    default:
      *lo = std::numeric_limits<int64_t>::min(), *hi = std::numeric_limits<int64_t>::max();
      return;
  }
}

int64_t load_integer(DType t, const void* row, int64_t i) {
  switch (t) {
    case DType::kI8:
      return load_as<int8_t>(row, i);
    case DType::kU8:
      return load_as<uint8_t>(row, i);
    case DType::kU4: {
      const uint8_t b = bytes(row)[i / 2];
      return (i % 2 == 0) ? (b & 0x0f) : (b >> 4);
    }
    case DType::kI32:
      return load_as<int32_t>(row, i);
    case DType::kI64:
      return load_as<int64_t>(row, i);
    default:
      throw ContractError(cat("load_integer on ", dtype_name(t)));
  }
}

void store_integer(DType t, void* row, int64_t i, int64_t v) {
  int64_t lo, hi;
  integer_range(t, &lo, &hi);
  v = std::clamp(v, lo, hi);
  switch (t) {
    case DType::kI8:
      store_as<int8_t>(row, i, static_cast<int8_t>(v));
      return;
    case DType::kU8:
      store_as<uint8_t>(row, i, static_cast<uint8_t>(v));
      return;
    case DType::kU4: {
      uint8_t& b = static_cast<uint8_t*>(row)[i / 2];
      b = (i % 2 == 0) ? static_cast<uint8_t>((b & 0xf0) | v)
                       : static_cast<uint8_t>((b & 0x0f) | (v << 4));
      return;
    }
    case DType::kI32:
      store_as<int32_t>(row, i, static_cast<int32_t>(v));
      return;
    case DType::kI64:
      store_as<int64_t>(row, i, v);
      return;
    default:
      throw ContractError(cat("store_integer on ", dtype_name(t)));
  }
}

// Float -> integer: round to nearest (ties to even), saturate, NaN -> 0.
int64_t float_to_integer(double v, DType t) {
  if (std::isnan(v)) return 0;
  int64_t lo, hi;
  integer_range(t, &lo, &hi);
  const double r = std::nearbyint(v);
  if (r <= static_cast<double>(lo)) return lo;
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(r);
}

// Byte offset of the element at multi-index `idx` (all dims but the last) of tensor t.
int64_t row_offset_bytes(const Tensor& t, const std::vector<int64_t>& idx) {
  int64_t elems = 0;
  for (size_t i = 0; i < idx.size(); ++i) elems += idx[i] * t.stride(static_cast<int>(i));
  return elems / dtype_block_size(t.dtype()) * dtype_block_bytes(t.dtype());
}

// Calls fn(src_row_ptr, src_inner_stride, row_index) for every row (last dimension) of src in
// order.
template <class Fn>
void for_each_row(const Tensor& src, Fn&& fn) {
  const int r = src.rank();
  if (src.numel() == 0) return;
  if (r == 0) {
    fn(static_cast<const uint8_t*>(src.raw_data()), int64_t{1}, int64_t{0});
    return;
  }
  const int64_t rows = src.numel() / src.size(-1);
  std::vector<int64_t> idx(r - 1, 0);
  const auto* base = static_cast<const uint8_t*>(src.raw_data());
  for (int64_t row = 0; row < rows; ++row) {
    fn(base + row_offset_bytes(src, idx), src.stride(-1), row);
    for (int i = r - 2; i >= 0; --i) {
      if (++idx[i] < src.size(i)) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

double load_value(DType t, const void* row, int64_t i) {
  switch (t) {
    case DType::kF32:
      return load_as<float>(row, i);
    case DType::kF16:
      return f16_to_f32(load_as<uint16_t>(row, i));
    case DType::kBF16:
      return bf16_to_f32(load_as<uint16_t>(row, i));
    case DType::kQ8_0: {
      const uint8_t* blk = bytes(row) + (i / kQuantBlock) * 34;
      return static_cast<double>(half_at(blk)) * static_cast<int8_t>(blk[2 + i % kQuantBlock]);
    }
    case DType::kQ4_0: {
      const uint8_t* blk = bytes(row) + (i / kQuantBlock) * 18;
      return static_cast<double>(half_at(blk)) *
             (nibble(blk + 2, static_cast<int>(i % kQuantBlock)) - 8);
    }
    case DType::kQ4_1: {
      const uint8_t* blk = bytes(row) + (i / kQuantBlock) * 20;
      return static_cast<double>(half_at(blk)) *
                 nibble(blk + 4, static_cast<int>(i % kQuantBlock)) +
             static_cast<double>(half_at(blk + 2));
    }
    case DType::kQ4_K: {  // sub-block j = e / 32 of 8; 6-bit scale and min; 4-bit q
      const uint8_t* blk = bytes(row) + (i / kKQuantBlock) * 144;
      const int e = static_cast<int>(i % kKQuantBlock), j = e / 32;
      const uint8_t* sc = blk + 4;
      const int scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
      const int min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
      const uint8_t byte = blk[16 + 32 * (e / 64) + e % 32];
      const int q = (e % 64) < 32 ? byte & 15 : byte >> 4;
      return static_cast<double>(half_at(blk)) * scale * q -
             static_cast<double>(half_at(blk + 2)) * min;
    }
    case DType::kQ6_K: {  // halves of 128: quarter r / 32 picks the nibble and the qh bit pair
      const uint8_t* blk = bytes(row) + (i / kKQuantBlock) * 210;
      const int e = static_cast<int>(i % kKQuantBlock), h = e / 128, r = e % 128;
      const int quarter = r / 32, l = r % 32;
      const uint8_t lo = blk[64 * h + l + (quarter % 2) * 32];
      const int low = quarter < 2 ? lo & 15 : lo >> 4;
      const int high = (blk[128 + 32 * h + l] >> (2 * quarter)) & 3;
      const auto scale = static_cast<int8_t>(blk[192 + e / 16]);
      return static_cast<double>(half_at(blk + 208)) * scale * ((low | (high << 4)) - 32);
    }
    default:
      return static_cast<double>(load_integer(t, row, i));
  }
}

void store_value(DType t, void* row, int64_t i, double v) {
  switch (t) {
    case DType::kF32:
      store_as<float>(row, i, static_cast<float>(v));
      return;
    case DType::kF16:
      store_as<uint16_t>(row, i, f32_to_f16(static_cast<float>(v)));
      return;
    case DType::kBF16:
      store_as<uint16_t>(row, i, f32_to_bf16(static_cast<float>(v)));
      return;
    default:
      if (!is_integer(t)) throw ContractError(cat("store_value on ", dtype_name(t)));
      store_integer(t, row, i, float_to_integer(v, t));
  }
}

void quantize_block_ref(DType t, const float* x, void* block) {
  auto* out = static_cast<uint8_t*>(block);
  switch (t) {
    case DType::kQ8_0: {  // d = amax / 127, q = round(x / d)
      float amax = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      put_half(out, d);
      for (int j = 0; j < kQuantBlock; ++j)
        out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
      return;
    }
    case DType::kQ4_0: {  // d = (value of largest magnitude) / -8, q = min(15, floor(x / d + 8.5))
      float amax = 0.0f, vmax = 0.0f;
      for (int j = 0; j < kQuantBlock; ++j) {
        if (std::fabs(x[j]) > amax) {
          amax = std::fabs(x[j]);
          vmax = x[j];
        }
      }
      const float d = vmax / -8.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      put_half(out, d);
      uint8_t* qs = out + 2;
      for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
        const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
        qs[j] = static_cast<uint8_t>(lo | (hi << 4));
      }
      return;
    }
    case DType::kQ4_1: {  // d = (max - min) / 15, m = min, q = min(15, floor((x - m) / d + 0.5))
      float lo = x[0], hi = x[0];
      for (int j = 1; j < kQuantBlock; ++j) {
        lo = std::min(lo, x[j]);
        hi = std::max(hi, x[j]);
      }
      const float d = (hi - lo) / 15.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      put_half(out, d);
      put_half(out + 2, lo);
      uint8_t* qs = out + 4;
      for (int j = 0; j < 16; ++j) {
        const int a = std::min(15, static_cast<int>((x[j] - lo) * id + 0.5f));
        const int b = std::min(15, static_cast<int>((x[j + 16] - lo) * id + 0.5f));
        qs[j] = static_cast<uint8_t>(a | (b << 4));
      }
      return;
    }
    default:
      throw ContractError(cat("quantize_block_ref to ", dtype_name(t)));
  }
}

void convert(const Tensor& src, const Tensor& dst) {
  const DType st = src.dtype(), dt = dst.dtype();
  const int64_t inner = src.rank() == 0 ? 1 : src.size(-1);
  auto* out = static_cast<uint8_t*>(dst.raw_data());
  const int64_t out_row_bytes = dtype_row_bytes(dt, inner);

  if (st ==
      dt) {  // strided copy, element by element (whole rows for block types, whose rows are dense)
    const int64_t unit = dtype_block_bytes(st);
    for_each_row(src, [&](const uint8_t* row, int64_t stride, int64_t r) {
      uint8_t* o = out + r * out_row_bytes;
      if (dtype_is_blocked(st) || stride == 1) {
        std::memcpy(o, row, static_cast<size_t>(out_row_bytes));
      } else {
        for (int64_t j = 0; j < inner; ++j)
          std::memcpy(o + j * unit, row + j * stride * unit, static_cast<size_t>(unit));
      }
    });
    return;
  }

  const bool int_to_int = is_integer(st) && is_integer(dt);
  const bool to_blocks = dt == DType::kQ8_0 || dt == DType::kQ4_0 || dt == DType::kQ4_1;
  std::vector<float> fbuf(to_blocks ? inner : 0);
  if (dt == DType::kU4) std::memset(out, 0, static_cast<size_t>(dst.nbytes()));
  for_each_row(src, [&](const uint8_t* row, int64_t stride, int64_t r) {
    uint8_t* o = out + r * out_row_bytes;
    // Element j of this row sits at element offset j * stride from `row` (stride is 1 for block
    // types).
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t e = j * stride;
      if (int_to_int) {
        store_integer(dt, o, j, load_integer(st, row, e));
      } else if (to_blocks) {
        fbuf[j] = static_cast<float>(load_value(st, row, e));
      } else {
        store_value(dt, o, j, load_value(st, row, e));
      }
    }
    if (to_blocks) {
      const int64_t block_bytes = dtype_block_bytes(dt);
      for (int64_t b = 0; b < inner / kQuantBlock; ++b)
        quantize_block_ref(dt, fbuf.data() + b * kQuantBlock, o + b * block_bytes);
    }
  });
}

void check_ids(const Tensor& ids, int64_t rows, const char* op) {
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < ids.numel(); ++t) {
    if (id[t] < 0 || id[t] >= rows)
      throw InvalidArgument(
          cat(op, ": id ", id[t], " at position ", t, " outside [0, ", rows, ")"));
  }
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  const int64_t v = table.size(0), d = table.size(1);
  check_ids(ids, v, "embedding");
  const int32_t* id = ids.data<int32_t>();
  float* o = out.data<float>();
  const auto* base = static_cast<const uint8_t*>(table.raw_data());
  const int64_t row_bytes = dtype_row_bytes(table.dtype(), d);
  for (int64_t t = 0; t < ids.numel(); ++t) {
    const uint8_t* row = base + id[t] * row_bytes;
    for (int64_t j = 0; j < d; ++j)
      o[t * d + j] = static_cast<float>(load_value(table.dtype(), row, j));
  }
}

}  // namespace tandem::cpu::ref
