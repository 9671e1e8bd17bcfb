// SPDX-License-Identifier: Apache-2.0
// Per-ISA inner loops of the fast CPU kernels, as a table of function pointers. The same generic
// source (isa_kernels.inc, written against a small vector type V) is compiled three times: for
// AVX-512 (isa_avx512.cpp), AVX2+FMA+F16C (isa_avx2.cpp) and baseline x86-64 / any architecture
// (isa_scalar.cpp), each under its own `#pragma GCC target` (the pragma form of
// __attribute__((target(...)))), never with -march flags. isa() picks the best table the host
// supports (cpu_info()) once; TANDEM_CPU_ISA=avx2|scalar forces a lower one (tests use it to
// exercise every variant on one machine).
//
// The tables hold only single-threaded loops over rows/blocks; threading (OpenMP) and the choice of
// library (oneDNN, OpenBLAS) live in the callers, which are compiled for the baseline ISA.
#pragma once

#include <cstdint>

#include "tandem/core/dtype.h"
#include "tandem/ops/params.h"

namespace tandem::cpu {

// n elements of dtype t (f32, f16, bf16, q8_0, q4_0, q4_1; n a multiple of 32 for the block types)
// starting at src -> n floats at dst, vectorised for the host (AVX-512 / AVX2+F16C / scalar).
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// n floats -> dtype t (f32, f16, bf16: round to nearest even; q8_0, q4_0, q4_1: GGUF reference
// quantization, bit-identical to the reference kernels; n a multiple of 32 for those).
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// One attention problem (all pointers to contiguous [T, H, D] tensors); see attention.cpp.
struct AttnArgs {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  int64_t tq, tk, hq, hkv, d, dv;
  float scale;
  bool causal;
  int64_t q_offset;
};

struct IsaKernels {
  const char* name;  // "avx512", "avx2", "scalar"

  // f32 GEMM micro-kernel: C[mr, nr] = alpha * Apanel * Bpanel + beta * C (beta == 0: C not read).
  // Apanel is k x gemm_mr (k-major, gemm_mr values per step), Bpanel k x gemm_nr; mr <= gemm_mr,
  // nr <= gemm_nr (panels are zero-padded).
  int gemm_mr, gemm_nr;
  void (*sgemm_micro)(int64_t k, const float* ap, const float* bp, float* c, int64_t ldc, int mr,
                      int nr, float alpha, float beta);

  // GEMV for small M (1..8), fused with the weight decoding: for n in [n0, n1):
  //   y[i, n] = alpha * sum_k x[i, k] * W[n, k] + beta * y[i, n]   (beta == 0: y not read)
  // W rows of dtype t (f32, f16, bf16, q8_0, q4_0, q4_1) are `w_row_bytes` apart, read once.
  // See isa_gemv.inc for how the block formats are computed.
  void (*gemv)(DType t, int m, int64_t k, const float* x, int64_t ldx, const uint8_t* w,
               int64_t w_row_bytes, int64_t n0, int64_t n1, float* y, int64_t ldy, float alpha,
               float beta);

  void (*dequantize_row)(DType t, const void* src, float* dst, int64_t n);
  void (*quantize_row)(DType t, const float* src, void* dst, int64_t n);

  // Row kernels (y may equal x).
  void (*softmax_row)(const float* x, float* y, int64_t n);
  void (*rms_norm_row)(const float* x, const float* w, float* y, int64_t n, float eps);
  void (*layer_norm_row)(const float* x, const float* w, const float* b, float* y, int64_t n,
                         float eps);
  void (*unary)(ops::UnaryOp op, const float* x, float* y, int64_t n);
  void (*binary)(ops::BinaryOp op, const float* a, const float* b, float* y, int64_t n);
  void (*binary_scalar)(ops::BinaryOp op, const float* a, float b, float* y, int64_t n);
  // One head of RoPE. neox: cs/sn hold cos/sin of the rd/2 pair angles. Interleaved: cs and sn have
  // rd entries, cs[2i] = cs[2i+1] = cos, sn[2i] = -sin, sn[2i+1] = sin. Elements [rd, d) are
  // copied.
  void (*rope_head)(const float* x, float* y, const float* cs, const float* sn, int64_t rd,
                    int64_t d, bool neox);

  // Attention for query rows [i0, i1) of query heads [h0, h1) (heads of one KV group), online
  // softmax over key blocks; scratch holds (h1 - h0) * (i1 - i0) * (dv + 2) + kAttnKeyBlock floats.
  void (*attention_rows)(const AttnArgs& a, int64_t h0, int64_t h1, int64_t i0, int64_t i1,
                         float* scratch);

  float (*dot)(const float* a, const float* b, int64_t n);
  // y = exp(x - m); returns the sum of y.
  float (*exp_sub_sum)(const float* x, float m, float* y, int64_t n);
  void (*scale)(float a, float* y, int64_t n);
};

inline constexpr int64_t kAttnKeyBlock = 64;

const IsaKernels& isa();

namespace avx512 {
const IsaKernels* table();  // nullptr when not compiled for this architecture
}
namespace avx2 {
const IsaKernels* table();
}
namespace scalar {
const IsaKernels* table();
}

}  // namespace tandem::cpu
