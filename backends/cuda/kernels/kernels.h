// SPDX-License-Identifier: Apache-2.0
// C-style launchers of the CUDA backend's own kernels. They take device pointers, sizes and a
// stream, enqueue the work and return cudaGetLastError() (the glue wraps them in
// TANDEM_CUDA_CHECK). The caller has made the stream's device current and validated the arguments.
// All sizes are int64 and every kernel uses grid-stride loops, so any size that fits in memory is
// covered with a bounded grid. This header stays free of tandem's heavy headers so the .cu files
// compile quickly.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "flash_decode.h"
#include "tandem/core/dtype.h"
#include "tandem/ops/params.h"

namespace tandem::cuda::k {

inline constexpr int kMaxDims = 8;

// Shape and strides (in elements) of a possibly strided source, for gathers and conversions.
struct StridedView {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
};

// ------------------------------------------------------------------- weights (quant.cu)
// Weight dtypes: kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_1 (rows of `cols` elements, dtype_row_bytes
// each).

// dst[r, c] = float(src[r, c]) for rows x cols.
cudaError_t dequantize_rows(DType t, const void* src, float* dst, int64_t rows, int64_t cols,
                            cudaStream_t s);
// c[i, j] = alpha * sum_k a(i, k) * w[j, k] + beta * c[i, j] for i < m <= kGemvMaxRows, j < n.
// a(i, k) = a[i * a_stride_m + k * a_stride_k]; w: [n, k] of a non-f32 weight dtype; c: [m, n].
// beta == 0 does not read c.
inline constexpr int kGemvMaxRows = 8;
cudaError_t gemv_weights(DType t, const float* a, int64_t a_stride_m, int64_t a_stride_k,
                         const void* w, float* c, int m, int64_t n, int64_t k, float alpha,
                         float beta, cudaStream_t s);
// The same product with the activation rows rounded to int8 per 32-element block first
// (ops::GemmParams::int8_activations; gemv_int8.cu, arithmetic in gemv_int8_block.h): w q8_0,
// q4_0 or q4_1, k a multiple of 32, m <= kGemvMaxRows. scratch: gemv_int8_scratch_bytes(m, k) of
// device memory, 16-byte aligned.
size_t gemv_int8_scratch_bytes(int m, int64_t k);
cudaError_t gemv_int8(DType t, const float* a, int64_t a_stride_m, int64_t a_stride_k,
                      const void* w, float* c, int m, int64_t n, int64_t k, float alpha, float beta,
                      void* scratch, cudaStream_t s);
// out[i, :] = float(table[ids[i], :]); ids outside [0, vocab) are clamped (the glue checks them
// first).
cudaError_t embedding(DType t, const void* table, const int32_t* ids, float* out, int64_t tokens,
                      int64_t vocab, int64_t dim, cudaStream_t s);

// ------------------------------------------------------------------- elementwise (elementwise.cu)
cudaError_t unary(ops::UnaryOp op, const float* x, float* y, int64_t n, cudaStream_t s);
// y[i] = a[i] op b[i % nb]
cudaError_t binary(ops::BinaryOp op, const float* a, const float* b, float* y, int64_t n,
                   int64_t nb, cudaStream_t s);
// y[img, c, p] += bias[c] over [images, channels, plane]
cudaError_t add_channel_bias(float* y, const float* bias, int64_t images, int64_t channels,
                             int64_t plane, cudaStream_t s);

// ------------------------------------------------------------------- rows (rows.cu)
cudaError_t softmax(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t s);
cudaError_t rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols,
                     float eps, cudaStream_t s);
// b may be null (no bias).
cudaError_t layer_norm(const float* x, const float* w, const float* b, float* y, int64_t rows,
                       int64_t cols, float eps, cudaStream_t s);
// x, y: [tokens, heads, dim]; pos: [tokens]; y may alias x.
cudaError_t rope(const float* x, const int32_t* pos, float* y, int64_t tokens, int64_t heads,
                 int64_t dim, int64_t rotary_dim, float theta, bool neox, cudaStream_t s);

// ------------------------------------------------------------------- attention (attention.cu)
struct AttentionArgs {
  const float* q = nullptr;  // [tq, hq, d]
  const float* k = nullptr;  // [tk, hkv, d]
  const float* v = nullptr;  // [tk, hkv, dv]
  float* out = nullptr;      // [tq, hq, dv]
  int64_t tq = 0, tk = 0, hq = 0, hkv = 0, d = 0, dv = 0;
  float scale = 1.0f;
  bool causal = true;
  int64_t q_offset = 0;  // absolute position of query row 0
};
// Dynamic shared memory the attention kernel needs; the glue rejects sizes above the device limit.
size_t attention_smem_bytes(int64_t d, int64_t dv);
cudaError_t attention(const AttentionArgs& a, cudaStream_t s);
// probs[h, r, :] = softmax row of query rows[r] and head h (zeros at masked keys); probs: [hq,
// n_rows, tk].
cudaError_t attention_probs(const AttentionArgs& a, const int64_t* rows, int64_t n_rows,
                            float* probs, cudaStream_t s);

// ------------------------------------------------------------------- conv (conv.cu)
struct Im2colArgs {
  int64_t channels = 0, height = 0, width = 0;  // input image [channels, height, width]
  int64_t kh = 0, kw = 0, out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1, pad_top = 0, pad_left = 0, dilation_h = 1, dilation_w = 1;
};
// col[(c * kh + i) * kw + j, oy * out_w + ox] = x[c, oy * stride_h - pad_top + i * dilation_h, ...]
// or 0.
cudaError_t im2col(const float* x, float* col, const Im2colArgs& a, cudaStream_t s);

// ------------------------------------------------------------------- convert (convert.cu)
// dst (contiguous, dst_t) = src viewed through `view` (src_t), n elements. Handles every pair of
// dtypes except a strided block-quantized source (use gather_units); quantized destinations are
// written block by block (f32 -> q8_0 / q4_0 / q4_1 with the GGML rounding rules), u4 destinations
// two values per byte. Float -> integer conversions round to nearest even and saturate (NaN -> 0).
cudaError_t convert(DType src_t, const void* src, const StridedView& view, DType dst_t, void* dst,
                    int64_t n, cudaStream_t s);
// Copies n storage units of unit_bytes each from a strided source (strides in units) to a dense
// dst.
cudaError_t gather_units(const void* src, const StridedView& view, int64_t unit_bytes, void* dst,
                         int64_t n, cudaStream_t s);

// ------------------------------------------------------------------- paged attention
// (paged_attention.cu, flash-decoding split and merge; chunk and merge math in flash_decode.h)
// One page of the paged KV store, as the kernel reads it (all pointers on the device).
struct PagedPage {
  const void* k = nullptr;  // [capacity, d] f32 or f16
  const void* v = nullptr;
  const int32_t* positions = nullptr;  // [used]
  int32_t used = 0;
  int32_t f16 = 0;  // 1: k and v are f16
};
struct PagedAttentionArgs {
  const float* q = nullptr;          // [tq, hq, d]
  float* out = nullptr;              // [tq, hq, d]
  const int32_t* q_pos = nullptr;    // [tq]
  const PagedPage* pages = nullptr;  // every head's pages, head by head
  // The slots of KV head h cut into chunks [head_chunk_begin[h], head_chunk_begin[h + 1]) of
  // `chunks` (plan_flash_chunks).
  const FlashChunk* chunks = nullptr;
  const int64_t* head_chunk_begin = nullptr;  // [hkv + 1]
  int64_t n_chunks = 0;
  float* partial = nullptr;  // paged_attention_partial_floats(...) floats of device scratch
  int64_t tq = 0, hq = 0, hkv = 0, d = 0;
  float scale = 1.0f;
};
// Dynamic shared memory of the split kernel for head dim d and GQA group size hq / hkv.
size_t paged_attention_smem_bytes(int64_t d, int64_t group);
int64_t paged_attention_partial_floats(int64_t tq, int64_t n_chunks, int64_t group, int64_t d);
cudaError_t paged_attention(const PagedAttentionArgs& a, cudaStream_t s);

// ------------------------------------------------------------------- quantized paged attention
// (kv_quant_attention.cu) Paged attention whose pages hold the packed K/V codes of the LLM engine's
// quantized KV cache (byte layouts in tandem/llm/kv_quant.h), decoded in registers. One side (K or
// V) of a page: codec 0 plain (bits 32: f32 rows, 16: f16 rows), 1 affine, 2 block32, 3 symmetric
// (mixed: bitmap of ceil(used/8) bytes, then 8- or 4-bit rows), 4 per-channel.
struct QuantKvSide {
  const uint8_t* data = nullptr;  // device
  int64_t bytes = 0;              // size of data (mixed rows past it are not read)
  uint8_t codec = 0, bits = 0, mixed = 0;
  uint16_t group = 0;
};
struct QuantKvPageDesc {
  QuantKvSide k, v;
  const int32_t* positions = nullptr;  // device, [used]
  int32_t used = 0;
  int32_t channel_scaled = 0;  // 1: scores use q * s_k, V rows go to the s_v-scaled sum
};
inline constexpr int64_t kQuantAttentionMaxDim = 256;
struct QuantPagedAttentionArgs {
  const float* q = nullptr;                // [tq, hq, d]
  float* out = nullptr;                    // [tq, hq, d]
  const int32_t* q_pos = nullptr;          // [tq]
  const QuantKvPageDesc* pages = nullptr;  // pages of KV head h: [head_begin[h], head_begin[h+1])
  const int64_t* head_begin = nullptr;     // [hkv + 1]
  const float* channel_scales = nullptr;   // [hkv, 2, d]: s_k, s_v (ones for unscaled heads)
  int64_t tq = 0, hq = 0, hkv = 0, d = 0;  // d <= kQuantAttentionMaxDim
  float scale = 1.0f;
};
cudaError_t quantized_paged_attention(const QuantPagedAttentionArgs& a, cudaStream_t s);

// ------------------------------------------------------------------- embedding bag
// (embedding_bag.cu) out[b, j] = pool over i in [offsets[b], offsets[b+1]) of table[indices[i], j]
// (f32 accumulation in index order; mean divides by the bag size, an empty bag gives 0). table:
// kF32 / kF16 rows of dim values, or kU8 row-wise int8 rows (dim codes, f32 scale, f32 bias).
// Indices and offsets are i64 when *_64 is set, else i32; the glue has checked them on the host
// (indices are clamped to [0, rows) all the same).
struct EmbeddingBagArgs {
  DType table_dtype = DType::kF32;
  const void* table = nullptr;
  int64_t rows = 0, dim = 0;
  const void* indices = nullptr;
  const void* offsets = nullptr;
  int indices_64 = 0, offsets_64 = 0;
  int64_t bags = 0;
  int mean = 0;
  float* out = nullptr;
};
cudaError_t embedding_bag(const EmbeddingBagArgs& a, cudaStream_t s);

}  // namespace tandem::cuda::k
