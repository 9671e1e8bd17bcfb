// SPDX-License-Identifier: Apache-2.0
// Backend-neutral ops. Each free function checks its arguments, finds the backend of the output's
// device and calls that backend's kernel (OpKernels). Every backend has the whole set; the CPU
// backend keeps a plain reference kernel for each op (cpu_reference_kernels()) against which the
// fast paths and the CUDA kernels are tested. Outputs are preallocated by the caller; all tensors
// of one call share a device. Activations are f32; weights (gemm B, embedding tables) may be
// f32/f16/bf16/q8_0/q4_0/q4_1. Tensors must be contiguous unless stated otherwise.
//
//   using namespace tandem;
//   auto a = Tensor::empty({M, K}, DType::kF32), w = load_weight(...);   // w: [N, K] q4_1
//   auto c = Tensor::empty({M, N}, DType::kF32);
//   ops::gemm(a, w, c, {.trans_b = true});                                // c = a @ w^T
//
// Stream: nullptr runs synchronously; otherwise the op is enqueued on the stream (tensors are kept
// alive by the queued work).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tandem/core/stream.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/ops/params.h"

namespace tandem::ops {

// c[M, N] = alpha * op(a) op(b) + beta * c.  a: f32 [M, K] (or [K, M] with trans_a).
// b: f32 [K, N] or [N, K] (trans_b); f16/bf16/q8_0/q4_0/q4_1 only as [N, K] with trans_b = true,
// dequantized on the fly. c: f32.
TANDEM_API void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p = {},
                     Stream* s = nullptr);
// Several weights against the same activations (a decoder layer's q/k/v, or gate/up):
// cs[i] = alpha * op(a) op(bs[i]) + beta * cs[i] for each i, each as ops::gemm(a, bs[i], cs[i], p)
// computes it, bit for bit, and under the same checks. No output may share memory with a. A
// backend may run the products as one pass: with p.int8_activations the CPU backend rounds a to
// int8 once and splits the rows of all the weights over one thread team (a decode step's GEMVs
// are too small for a team each); others run them one after the other.
//   Tensor ws[] = {wq, wk, wv}, outs[] = {q, k, v};
//   ops::gemm_group(h, ws, outs, {.trans_b = true, .int8_activations = true});
TANDEM_API void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs,
                           const GemmParams& p = {}, Stream* s = nullptr);
// Batched f32 GEMM over the leading dimension: a [B, M, K], b [B, K, N] (or [B, N, K]), c [B, M,
// N].
TANDEM_API void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p = {},
                             Stream* s = nullptr);
// Softmax over the last dimension; y may alias x.
TANDEM_API void softmax(const Tensor& x, Tensor& y, Stream* s = nullptr);
// y = x / rms(x) * weight over the last dimension (weight f32 [D]); y may alias x.
TANDEM_API void rms_norm(const Tensor& x, const Tensor& weight, Tensor& y, const NormParams& p = {},
                         Stream* s = nullptr);
// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension (bias may be undefined).
TANDEM_API void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                           const NormParams& p = {}, Stream* s = nullptr);
// Rotary position embedding. x, y: [T, H, D] f32; positions: i32 [T]. y may alias x.
TANDEM_API void rope(const Tensor& x, const Tensor& positions, Tensor& y, const RopeParams& p = {},
                     Stream* s = nullptr);
// Elementwise y = f(x); y may alias x.
TANDEM_API void unary(UnaryOp op, const Tensor& x, Tensor& y, Stream* s = nullptr);
inline void silu(const Tensor& x, Tensor& y, Stream* s = nullptr) {
  unary(UnaryOp::kSilu, x, y, s);
}
inline void gelu(const Tensor& x, Tensor& y, Stream* s = nullptr) {
  unary(UnaryOp::kGelu, x, y, s);
}
// Elementwise y = a op b, where b's shape equals a trailing part of a's shape (broadcast over the
// leading dims of a) or b has one element. y has a's shape and may alias a.
TANDEM_API void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y,
                       Stream* s = nullptr);
inline void add(const Tensor& a, const Tensor& b, Tensor& y, Stream* s = nullptr) {
  binary(BinaryOp::kAdd, a, b, y, s);
}
inline void mul(const Tensor& a, const Tensor& b, Tensor& y, Stream* s = nullptr) {
  binary(BinaryOp::kMul, a, b, y, s);
}
// out[t, :] = table[ids[t], :] as f32. table: [V, D] any weight dtype; ids: i32 [T]; out: f32 [T,
// D]. Throws InvalidArgument for ids outside [0, V).
TANDEM_API void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s = nullptr);
// Scaled dot-product attention with grouped-query heads, one sequence.
// q: [Tq, Hq, D]; k: [Tk, Hkv, D]; v: [Tk, Hkv, Dv]; out: [Tq, Hq, Dv]; Hq % Hkv == 0; all f32.
// causal: query row i (absolute position q_offset + i) sees keys j <= q_offset + i.
// probs (only when p.prob_rows is non-empty): f32 [Hq, prob_rows.size(), Tk], the softmax rows
// (zeros at masked keys).
TANDEM_API void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                          const AttentionParams& p = {}, Tensor* probs = nullptr,
                          Stream* s = nullptr);
// One page of a paged, ragged KV store (the LLM engine's KvCache block): K and V rows of `used`
// token slots (k, v: [capacity, D], f32 or f16, contiguous, on the device of the call) and the
// token position of each slot (host memory, `used` entries; keys were rotated with them).
struct KvPage {
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  const int32_t* positions = nullptr;
  int32_t used = 0;
};
// The pages of every KV head, in order; heads may hold different token sets (eviction).
struct PagedKv {
  std::vector<std::vector<KvPage>> heads;
};
// Attention of T queries over a paged KV store without gathering it: q f32 [T, Hq, D];
// q_positions (host, T entries); out f32 [T, Hq, D]. Query head h reads KV head h / (Hq / Hkv)
// and sees the slots whose position <= its own. scale 0 means 1/sqrt(D). A query that sees no slot
// gets zeros. InvalidArgument for mismatched shapes, dtypes, devices or page sizes.
TANDEM_API void paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                                const PagedKv& kv, Tensor& out, float scale = 0.0f,
                                Stream* s = nullptr);
// Pages whose K and V may be packed codes (the LLM engine's quantized KV cache on a GPU; byte
// layouts in tandem/llm/kv_quant.h). KvCodes mirrors llm::KvQuantFormat: codec 0 = plain rows of
// the page tensor's dtype (f32 or f16, [capacity, D]), 1 affine, 2 block32 (q8_0 / q4_0),
// 3 symmetric (mixed: per-slot 8/4-bit bitmap), 4 per-channel; coded sides are u8 [bytes].
struct KvCodes {
  uint8_t codec = 0;
  uint8_t bits = 0;
  uint16_t group = 0;
  bool mixed = false;
};
struct QuantKvPage {
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  const int32_t* positions = nullptr;  // host, `used` entries
  int32_t used = 0;
  KvCodes kq, vq;
  bool channel_scaled = false;  // holds K / s_k and V / s_v (scores use q * s_k, output * s_v)
};
struct QuantPagedKv {
  std::vector<std::vector<QuantKvPage>> heads;
  // Per KV head: host f32 [2, D] (s_k then s_v), or nullptr; required by channel-scaled pages.
  std::vector<const float*> channel_scales;
};
// Pooled embedding lookup (the recommender models' embedding bags): for each bag b,
// out[b, :] = pool over i in [offsets[b], offsets[b+1]) of row(indices[i]) as f32.
// table: f32 or f16 [rows, dim], or u8 [rows, dim + 8] holding row-wise int8 rows (dim uint8 codes
// q, then an f32 scale and an f32 bias: value = q * scale + bias; the recsys embedding store's
// layout). indices: i32 or i64 [n]; offsets: i32 or i64 [bags + 1] with offsets[0] == 0,
// non-decreasing, offsets[bags] == n; out: f32 [bags, dim]. Index data are checked on the host by
// every backend before any computing: InvalidArgument names the first index outside [0, rows) or
// the first bad offset (a GPU backend copies indices and offsets to the host for this).
TANDEM_API void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets,
                              Tensor& out, BagMode mode = BagMode::kSum, Stream* s = nullptr);
// The host-side check of embedding_bag's index data (n indices, bags + 1 offsets, each i32 or
// i64); backends call it on host copies. InvalidArgument("embedding_bag: ...") on the first error.
TANDEM_API void check_embedding_bag_indices(const void* indices, DType index_dtype, int64_t n,
                                            const void* offsets, DType offset_dtype, int64_t bags,
                                            int64_t rows);
// Columns of an embedding_bag table tensor: size(1), minus the 8 scale/bias bytes for u8 rows.
TANDEM_API int64_t embedding_bag_dim(const Tensor& table);

// 2-D convolution, NCHW f32. x: [N, C, H, W]; w: [Cout, C/groups, KH, KW]; bias: [Cout] or
// undefined.
TANDEM_API void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                       const Conv2dParams& p = {}, Stream* s = nullptr);
// Converts between dtypes elementwise (same shape): float types, integer types (saturating), and
// quantizing f32 -> q8_0/q4_0/q4_1 / dequantizing back. u4 is treated as integers 0..15.
TANDEM_API void convert(const Tensor& src, Tensor& dst, Stream* s = nullptr);

// Output shape of conv2d for the given input and weight shapes; throws InvalidArgument if empty.
TANDEM_API Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p);

// The kernel table one backend provides. Arguments have been validated by the free functions above
// (shapes, dtypes, devices), so kernels only compute. Streams are those of this backend's device.
// Parameters arrive resolved: attention's scale is never 0 and q_offset never -1 (callers of a
// kernel table directly, e.g. tests of cpu_reference_kernels(), must resolve them the same way).
class TANDEM_API OpKernels {
 public:
  virtual ~OpKernels() = default;
  virtual void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p,
                    Stream* s) = 0;
  virtual void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p,
                            Stream* s) = 0;
  // Arguments checked as gemm's, one (a, bs[i], cs[i]) at a time, and bs.size() == cs.size() > 0.
  // The default runs gemm for each pair in order (the reference path); a backend overrides it
  // where one pass over all the weights is faster.
  virtual void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs,
                          const GemmParams& p, Stream* s);
  virtual void softmax(const Tensor& x, Tensor& y, Stream* s) = 0;
  virtual void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const NormParams& p,
                        Stream* s) = 0;
  virtual void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                          const NormParams& p, Stream* s) = 0;
  virtual void rope(const Tensor& x, const Tensor& pos, Tensor& y, const RopeParams& p,
                    Stream* s) = 0;
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& y, Stream* s) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y, Stream* s) = 0;
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s) = 0;
  virtual void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                         const AttentionParams& p, Tensor* probs, Stream* s) = 0;
  virtual void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                      const Conv2dParams& p, Stream* s) = 0;
  // scale arrives resolved (never 0). The page table and q_positions are only valid during the
  // call: a kernel that runs asynchronously copies what it needs first.
  virtual void paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                               const PagedKv& kv, Tensor& out, float scale, Stream* s) = 0;
  // paged_attention over QuantPagedKv pages (the CUDA backend implements it; others throw
  // Unsupported: the CPU engine reads codes in llm/kv_quant). There is no free function: the LLM
  // cache (llm::cache_attention) is the caller and validates the pages against the codec sizes;
  // scale arrives resolved.
  virtual void quantized_paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                                         const QuantPagedKv& kv, Tensor& out, float scale,
                                         Stream* s);
  virtual void convert(const Tensor& src, Tensor& dst, Stream* s) = 0;
  // Index data are not yet checked: the kernel calls check_embedding_bag_indices() on the host
  // before computing (a GPU kernel on host copies).
  virtual void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets,
                             Tensor& out, BagMode mode, Stream* s) = 0;
};

// The CPU reference kernels (plain loops, double accumulation where it matters): the ground truth
// of the consistency suite. Synchronous; the stream argument, when given, is synchronized first.
TANDEM_API OpKernels& cpu_reference_kernels();

}  // namespace tandem::ops
