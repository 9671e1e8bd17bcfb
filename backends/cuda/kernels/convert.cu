// SPDX-License-Identifier: Apache-2.0
// dtype conversion with the CPU reference's rules (backends/cpu/reference/ref_convert.cpp): values
// travel as double (integers as int64 when both sides are integers); float -> integer rounds to
// nearest even, saturates and maps NaN to 0; quantization follows GGML's reference rounding, with
// explicitly rounded float operations so that no fused multiply-add changes a tie. Plus a strided
// gather of storage units.
#include "common.cuh"
#include "quant_block.h"

namespace tandem::cuda::k {
namespace {

__device__ __forceinline__ bool is_integer(DType t) {
  return t == DType::kI8 || t == DType::kU8 || t == DType::kU4 || t == DType::kI32 ||
         t == DType::kI64;
}

__device__ __forceinline__ void integer_range(DType t, int64_t* lo, int64_t* hi) {
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
      *lo = INT32_MIN, *hi = INT32_MAX;
      return;
    default:
      *lo = INT64_MIN, *hi = INT64_MAX;
      return;
  }
}

// Element `e` (an element offset) of an integer tensor starting at `p`.
__device__ __forceinline__ int64_t load_integer(DType t, const uint8_t* p, int64_t e) {
  switch (t) {
    case DType::kI8:
      return reinterpret_cast<const int8_t*>(p)[e];
    case DType::kU8:
      return p[e];
    case DType::kU4:
      return (e % 2 == 0) ? (p[e / 2] & 0x0f) : (p[e / 2] >> 4);
    case DType::kI32:
      return reinterpret_cast<const int32_t*>(p)[e];
    default:
      return reinterpret_cast<const int64_t*>(p)[e];
  }
}

__device__ __forceinline__ double load_value(DType t, const uint8_t* p, int64_t e) {
  if (is_integer(t)) return static_cast<double>(load_integer(t, p, e));
  if (t == DType::kQ4_1) {  // d * q + m evaluated in double, as the reference does
    const uint8_t* b = p + (e / 32) * 20;
    const int i = static_cast<int>(e % 32);
    const int q = i < 16 ? (b[4 + i] & 0x0f) : (b[4 + i - 16] >> 4);
    return static_cast<double>(half_bits_to_float(load_u16(b))) * q +
           static_cast<double>(half_bits_to_float(load_u16(b + 2)));
  }
  return static_cast<double>(load_weight(t, p, e));
}

__device__ __forceinline__ int64_t float_to_integer(double v, DType t) {
  if (isnan(v)) return 0;
  int64_t lo, hi;
  integer_range(t, &lo, &hi);
  const double r = rint(v);
  if (r <= static_cast<double>(lo)) return lo;
  if (r >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(r);
}

__device__ __forceinline__ int64_t clamp_integer(int64_t v, DType t) {
  int64_t lo, hi;
  integer_range(t, &lo, &hi);
  return v < lo ? lo : (v > hi ? hi : v);
}

// Value `i` of the source as an integer of dst type t (saturated).
__device__ __forceinline__ int64_t source_as_integer(DType st, const uint8_t* p, int64_t e,
                                                     DType t) {
  return is_integer(st) ? clamp_integer(load_integer(st, p, e), t)
                        : float_to_integer(load_value(st, p, e), t);
}

__device__ __forceinline__ int64_t source_offset(const StridedView& v, bool dense, int64_t i) {
  return dense ? i : view_offset(v, i);
}

// dst: a plain (non-packed) dtype.
__global__ void convert_kernel(DType st, const uint8_t* src, StridedView view, bool dense, DType dt,
                               uint8_t* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t e = source_offset(view, dense, i);
    switch (dt) {
      case DType::kF32:
        reinterpret_cast<float*>(dst)[i] = static_cast<float>(load_value(st, src, e));
        break;
      case DType::kF16:
        reinterpret_cast<uint16_t*>(dst)[i] =
            float_to_half_bits(static_cast<float>(load_value(st, src, e)));
        break;
      case DType::kBF16:
        reinterpret_cast<uint16_t*>(dst)[i] =
            float_to_bf16_bits(static_cast<float>(load_value(st, src, e)));
        break;
      case DType::kI8:
        reinterpret_cast<int8_t*>(dst)[i] = static_cast<int8_t>(source_as_integer(st, src, e, dt));
        break;
      case DType::kU8:
        dst[i] = static_cast<uint8_t>(source_as_integer(st, src, e, dt));
        break;
      case DType::kI32:
        reinterpret_cast<int32_t*>(dst)[i] =
            static_cast<int32_t>(source_as_integer(st, src, e, dt));
        break;
      default:
        reinterpret_cast<int64_t*>(dst)[i] = source_as_integer(st, src, e, dt);
        break;
    }
  }
}

// dst u4: one thread per byte (two values, low nibble first).
__global__ void convert_u4_kernel(DType st, const uint8_t* src, StridedView view, bool dense,
                                  uint8_t* dst, int64_t n) {
  for (int64_t b = global_thread(); b < n / 2; b += grid_threads()) {
    const int64_t lo = source_as_integer(st, src, source_offset(view, dense, 2 * b), DType::kU4);
    const int64_t hi =
        source_as_integer(st, src, source_offset(view, dense, 2 * b + 1), DType::kU4);
    dst[b] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// dst q8_0 / q4_0 / q4_1: one thread per block of 32 values (the block math is quant_block.h's,
// which a CPU test checks against the CPU reference).
__global__ void quantize_kernel(DType st, const uint8_t* src, StridedView view, bool dense,
                                DType dt, uint8_t* dst, int64_t n) {
  const int64_t bytes = dtype_block_bytes(dt);
  for (int64_t blk = global_thread(); blk < n / 32; blk += grid_threads()) {
    float x[32];
    for (int j = 0; j < 32; ++j)
      x[j] = static_cast<float>(load_value(st, src, source_offset(view, dense, blk * 32 + j)));
    quantize_block(dt, x, dst + blk * bytes);
  }
}

template <class T>
__global__ void gather_kernel(const T* src, StridedView view, T* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) dst[i] = src[view_offset(view, i)];
}

__global__ void gather_bytes_kernel(const uint8_t* src, StridedView view, int64_t unit,
                                    uint8_t* dst, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const uint8_t* s = src + view_offset(view, i) * unit;
    uint8_t* d = dst + i * unit;
    for (int64_t b = 0; b < unit; ++b) d[b] = s[b];
  }
}

bool is_dense(const StridedView& v) {
  int64_t expect = 1;
  for (int d = v.rank - 1; d >= 0; --d) {
    if (v.shape[d] != 1 && v.strides[d] != expect) return false;
    expect *= v.shape[d];
  }
  return true;
}

}  // namespace

cudaError_t convert(DType st, const void* src, const StridedView& view, DType dt, void* dst,
                    int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const bool dense = is_dense(view);
  if (dt == DType::kQ8_0 || dt == DType::kQ4_0 || dt == DType::kQ4_1) {
    quantize_kernel<<<grid_for(n / 32, 128), 128, 0, s>>>(st, in, view, dense, dt, out, n);
  } else if (dt == DType::kU4) {
    convert_u4_kernel<<<grid_for(n / 2), kThreads, 0, s>>>(st, in, view, dense, out, n);
  } else {
    convert_kernel<<<grid_for(n), kThreads, 0, s>>>(st, in, view, dense, dt, out, n);
  }
  return cudaGetLastError();
}

cudaError_t gather_units(const void* src, const StridedView& view, int64_t unit_bytes, void* dst,
                         int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned g = grid_for(n);
  switch (unit_bytes) {
    case 1:
      gather_kernel<<<g, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), view,
                                           static_cast<uint8_t*>(dst), n);
      break;
    case 2:
      gather_kernel<<<g, kThreads, 0, s>>>(static_cast<const uint16_t*>(src), view,
                                           static_cast<uint16_t*>(dst), n);
      break;
    case 4:
      gather_kernel<<<g, kThreads, 0, s>>>(static_cast<const uint32_t*>(src), view,
                                           static_cast<uint32_t*>(dst), n);
      break;
    case 8:
      gather_kernel<<<g, kThreads, 0, s>>>(static_cast<const uint64_t*>(src), view,
                                           static_cast<uint64_t*>(dst), n);
      break;
    default:
      gather_bytes_kernel<<<g, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), view, unit_bytes,
                                                 static_cast<uint8_t*>(dst), n);
  }
  return cudaGetLastError();
}

}  // namespace tandem::cuda::k
