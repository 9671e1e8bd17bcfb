// SPDX-License-Identifier: Apache-2.0
// Fast convert: the paths that matter for speed, multithreaded over chunks.
//   same dtype, contiguous        memcpy
//   same dtype, strided           row by row (memcpy rows whose last dimension is dense)
//   f32 -> f16/bf16/q8_0/q4_0/q4_1 and back (contiguous source): the vector row routines of
//   dequant.h
// Every other pair (integers, u4, f16 <-> bf16, strided conversions) goes through the reference
// loop, which defines the semantics (rounding, saturation).
#include <algorithm>
#include <cstring>
#include <vector>

#include "../reference/reference.h"
#include "fast_ops.h"
#include "isa.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"

namespace tandem::cpu::fast {
namespace {

constexpr int64_t kConvertGrain = 1 << 16;  // elements per work item (a multiple of 32)

bool is_weight_float(DType t) {
  return t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 || t == DType::kQ4_0 ||
         t == DType::kQ4_1;
}

void strided_copy(const Tensor& src, const Tensor& dst) {
  const int r = src.rank();
  const int64_t inner = src.size(-1), rows = src.numel() / inner, inner_stride = src.stride(-1);
  const DType t = src.dtype();
  const int64_t unit = dtype_block_bytes(t), block = dtype_block_size(t);
  const int64_t row_bytes = dtype_row_bytes(t, inner);
  const bool dense_rows = dtype_is_blocked(t) || inner_stride == 1;
  const auto* sp = static_cast<const uint8_t*>(src.raw_data());
  auto* dp = static_cast<uint8_t*>(dst.raw_data());
  const int64_t per = std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(inner, 1));
  const int threads = parallel_threads(rows * inner, 2 * rows * row_bytes, cpu_num_threads());
  parallel_for((rows + per - 1) / per, threads, [&](int64_t c, int) {
    for (int64_t row = c * per; row < std::min(rows, (c + 1) * per); ++row) {
      int64_t rem = row, elems = 0;  // element offset of this row in src
      for (int i = r - 2; i >= 0; --i) {
        elems += (rem % src.size(i)) * src.stride(i);
        rem /= src.size(i);
      }
      const uint8_t* s = sp + elems / block * unit;
      uint8_t* d = dp + row * row_bytes;
      if (dense_rows) {
        std::memcpy(d, s, static_cast<size_t>(row_bytes));
      } else {
        for (int64_t j = 0; j < inner; ++j)
          std::memcpy(d + j * unit, s + j * inner_stride * unit, static_cast<size_t>(unit));
      }
    }
  });
}

}  // namespace

void convert(const Tensor& src, const Tensor& dst) {
  const DType st = src.dtype(), dt = dst.dtype();
  const int64_t total = src.numel();
  if (total == 0) return;
  const int threads = parallel_threads(total, src.nbytes() + dst.nbytes(), cpu_num_threads());
  if (st == dt) {
    if (src.is_contiguous()) {
      const auto* s = static_cast<const uint8_t*>(src.raw_data());
      auto* d = static_cast<uint8_t*>(dst.raw_data());
      const int64_t bytes = src.nbytes(), grain = int64_t{1} << 20;
      parallel_for((bytes + grain - 1) / grain, threads, [&](int64_t c, int) {
        const int64_t b0 = c * grain, b1 = std::min(bytes, b0 + grain);
        std::memcpy(d + b0, s + b0, static_cast<size_t>(b1 - b0));
      });
    } else if (src.rank() > 0) {
      strided_copy(src, dst);
    } else {
      ref::convert(src, dst);
    }
    return;
  }
  const bool quantize = st == DType::kF32 && is_weight_float(dt);
  const bool dequantize = dt == DType::kF32 && is_weight_float(st);
  if ((quantize || dequantize) && src.is_contiguous()) {
    // Chunks of kConvertGrain elements start on block boundaries (kConvertGrain is a multiple of 32
    // and rows of block types hold whole blocks).
    const IsaKernels& k = isa();
    const DType packed = quantize ? dt : st;
    const auto* s = static_cast<const uint8_t*>(src.raw_data());
    auto* d = static_cast<uint8_t*>(dst.raw_data());
    parallel_for((total + kConvertGrain - 1) / kConvertGrain, threads, [&](int64_t c, int) {
      const int64_t e0 = c * kConvertGrain, n = std::min(total, e0 + kConvertGrain) - e0;
      const int64_t off = dtype_row_bytes(packed, e0);
      if (quantize) {
        k.quantize_row(dt, reinterpret_cast<const float*>(s) + e0, d + off, n);
      } else {
        k.dequantize_row(st, s + off, reinterpret_cast<float*>(d) + e0, n);
      }
    });
    return;
  }
  ref::convert(src, dst);
}

}  // namespace tandem::cpu::fast
