// SPDX-License-Identifier: Apache-2.0
// Argument checks of the backend-neutral ops, then dispatch to the backend of the output's device.
#include "tandem/ops/ops.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"

// Throws InvalidArgument("<op>: <what>"); `what` is only evaluated when the check fails, so passing
// calls (every decode step runs dozens) never build messages.
#define TANDEM_NEED(cond, op, what)                                    \
  do {                                                                 \
    if (!(cond)) throw ::tandem::InvalidArgument(cat(op, ": ", what)); \
  } while (0)

namespace tandem::ops {
namespace {

ops::OpKernels& kernels_for(const Tensor& out) {
  return BackendRegistry::global().get(out.device()).kernels();
}

void need_defined(const Tensor& t, const char* op, const char* name) {
  TANDEM_NEED(t.defined(), op, cat(name, " is undefined"));
}

void same_device(const char* op, const Tensor& ref, std::initializer_list<const Tensor*> others) {
  for (const Tensor* t : others) {
    if (t && t->defined() && !(t->device() == ref.device()))
      throw InvalidArgument(cat(op, ": tensors on different devices (", t->device().to_string(),
                                " and ", ref.device().to_string(), ")"));
  }
}

void need_f32(const Tensor& t, const char* op, const char* name) {
  TANDEM_NEED(t.dtype() == DType::kF32, op, cat(name, " must be f32, got ", dtype_name(t.dtype())));
}

void need_contig(const Tensor& t, const char* op, const char* name) {
  TANDEM_NEED(t.is_contiguous(), op, cat(name, " must be contiguous: ", t.to_string()));
}

bool is_weight_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kQ8_0 ||
         t == DType::kQ4_0 || t == DType::kQ4_1 || dtype_is_k_quant(t);
}

}  // namespace

namespace {
void check_gemm(const char* op, const Tensor& a, const Tensor& b, const Tensor& c,
                const GemmParams& p) {
  need_defined(a, op, "a");
  need_defined(b, op, "b");
  need_defined(c, op, "c");
  same_device(op, c, {&a, &b});
  TANDEM_NEED(
      a.rank() == 2 && b.rank() == 2 && c.rank() == 2, op,
      cat("expects rank-2 tensors, got ", a.to_string(), ", ", b.to_string(), ", ", c.to_string()));
  need_f32(a, op, "a");
  need_f32(c, op, "c");
  TANDEM_NEED(is_weight_dtype(b.dtype()), op, cat("unsupported b dtype ", dtype_name(b.dtype())));
  TANDEM_NEED(b.dtype() == DType::kF32 || p.trans_b, op,
              cat(dtype_name(b.dtype()), " weights must be stored [N, K] (trans_b = true)"));
  need_contig(a, op, "a");
  need_contig(b, op, "b");
  need_contig(c, op, "c");
  const int64_t m = p.trans_a ? a.size(1) : a.size(0), k = p.trans_a ? a.size(0) : a.size(1);
  const int64_t kb = p.trans_b ? b.size(1) : b.size(0), n = p.trans_b ? b.size(0) : b.size(1);
  TANDEM_NEED(k == kb && c.size(0) == m && c.size(1) == n, op,
              cat("shape mismatch: a ", a.shape().to_string(), (p.trans_a ? "^T" : ""), ", b ",
                  b.shape().to_string(), (p.trans_b ? "^T" : ""), ", c ", c.shape().to_string()));
}

// True when the bytes of x and y overlap (both defined and contiguous).
bool overlap(const Tensor& x, const Tensor& y) {
  const auto* x0 = static_cast<const char*>(x.raw_data());
  const auto* y0 = static_cast<const char*>(y.raw_data());
  return x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}
}  // namespace

void gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p, Stream* s) {
  check_gemm("gemm", a, b, c, p);
  kernels_for(c).gemm(a, b, c, p, s);
}

void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs,
                const GemmParams& p, Stream* s) {
  const char* op = "gemm_group";
  TANDEM_NEED(
      !bs.empty() && bs.size() == cs.size(), op,
      cat(bs.size(), " weights and ", cs.size(), " outputs (need the same non-zero count)"));
  for (size_t i = 0; i < bs.size(); ++i) {
    check_gemm(op, a, bs[i], cs[i], p);
    same_device(op, cs[0], {&cs[i]});
    TANDEM_NEED(!overlap(a, cs[i]), op, cat("output ", i, " shares memory with a"));
    for (size_t j = 0; j < i; ++j) {
      TANDEM_NEED(!overlap(cs[j], cs[i]), op, cat("outputs ", j, " and ", i, " share memory"));
    }
  }
  kernels_for(cs[0]).gemm_group(a, bs, cs, p, s);
}

void OpKernels::gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs,
                           const GemmParams& p, Stream* s) {
  for (size_t i = 0; i < bs.size(); ++i) gemm(a, bs[i], cs[i], p, s);
}

void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const GemmParams& p, Stream* s) {
  const char* op = "batched_gemm";
  need_defined(a, op, "a");
  need_defined(b, op, "b");
  need_defined(c, op, "c");
  same_device(op, c, {&a, &b});
  TANDEM_NEED(a.rank() == 3 && b.rank() == 3 && c.rank() == 3, op,
              "expects rank-3 tensors [B, rows, cols]");
  need_f32(a, op, "a");
  need_f32(b, op, "b");
  need_f32(c, op, "c");
  need_contig(a, op, "a");
  need_contig(b, op, "b");
  need_contig(c, op, "c");
  const int64_t m = p.trans_a ? a.size(2) : a.size(1), k = p.trans_a ? a.size(1) : a.size(2);
  const int64_t kb = p.trans_b ? b.size(2) : b.size(1), n = p.trans_b ? b.size(1) : b.size(2);
  TANDEM_NEED(a.size(0) == b.size(0) && a.size(0) == c.size(0) && k == kb && c.size(1) == m &&
                  c.size(2) == n,
              op,
              cat("shape mismatch: a ", a.shape().to_string(), ", b ", b.shape().to_string(),
                  ", c ", c.shape().to_string()));
  kernels_for(c).batched_gemm(a, b, c, p, s);
}

namespace {
void same_shape_f32(const char* op, const Tensor& x, const Tensor& y) {
  need_defined(x, op, "x");
  need_defined(y, op, "y");
  same_device(op, y, {&x});
  need_f32(x, op, "x");
  need_f32(y, op, "y");
  need_contig(x, op, "x");
  need_contig(y, op, "y");
  TANDEM_NEED(x.shape() == y.shape(), op,
              cat("x ", x.shape().to_string(), " and y ", y.shape().to_string(), " differ"));
}
}  // namespace

void softmax(const Tensor& x, Tensor& y, Stream* s) {
  same_shape_f32("softmax", x, y);
  TANDEM_NEED(x.rank() >= 1, "softmax", "needs rank >= 1");
  kernels_for(y).softmax(x, y, s);
}

void rms_norm(const Tensor& x, const Tensor& weight, Tensor& y, const NormParams& p, Stream* s) {
  const char* op = "rms_norm";
  same_shape_f32(op, x, y);
  need_defined(weight, op, "weight");
  same_device(op, y, {&weight});
  need_f32(weight, op, "weight");
  need_contig(weight, op, "weight");
  TANDEM_NEED(x.rank() >= 1 && weight.rank() == 1 && weight.size(0) == x.size(-1), op,
              cat("weight ", weight.shape().to_string(), " does not match the last dim of ",
                  x.shape().to_string()));
  TANDEM_NEED(p.eps >= 0, op, "eps must be >= 0");
  kernels_for(y).rms_norm(x, weight, y, p, s);
}

void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y,
                const NormParams& p, Stream* s) {
  const char* op = "layer_norm";
  same_shape_f32(op, x, y);
  need_defined(weight, op, "weight");
  same_device(op, y, {&weight, &bias});
  need_f32(weight, op, "weight");
  TANDEM_NEED(x.rank() >= 1 && weight.rank() == 1 && weight.size(0) == x.size(-1), op,
              cat("weight ", weight.shape().to_string(), " does not match the last dim of ",
                  x.shape().to_string()));
  if (bias.defined()) {
    need_f32(bias, op, "bias");
    TANDEM_NEED(bias.shape() == weight.shape(), op, "bias and weight shapes differ");
  }
  TANDEM_NEED(p.eps >= 0, op, "eps must be >= 0");
  kernels_for(y).layer_norm(x, weight, bias, y, p, s);
}

void rope(const Tensor& x, const Tensor& positions, Tensor& y, const RopeParams& p, Stream* s) {
  const char* op = "rope";
  same_shape_f32(op, x, y);
  need_defined(positions, op, "positions");
  same_device(op, y, {&positions});
  TANDEM_NEED(x.rank() == 3, op, cat("x must be [T, H, D], got ", x.shape().to_string()));
  TANDEM_NEED(
      positions.dtype() == DType::kI32 && positions.rank() == 1 && positions.size(0) == x.size(0),
      op, cat("positions must be i32 [", x.size(0), "], got ", positions.to_string()));
  const int64_t rd = p.rotary_dim < 0 ? x.size(2) : p.rotary_dim;
  TANDEM_NEED(rd % 2 == 0 && rd <= x.size(2), op,
              cat("rotary_dim ", rd, " must be even and <= head dim ", x.size(2)));
  TANDEM_NEED(p.theta > 0, op, "theta must be > 0");
  kernels_for(y).rope(x, positions, y, p, s);
}

void unary(UnaryOp o, const Tensor& x, Tensor& y, Stream* s) {
  same_shape_f32("unary", x, y);
  kernels_for(y).unary(o, x, y, s);
}

void binary(BinaryOp o, const Tensor& a, const Tensor& b, Tensor& y, Stream* s) {
  const char* op = "binary";
  same_shape_f32(op, a, y);
  need_defined(b, op, "b");
  same_device(op, y, {&b});
  need_f32(b, op, "b");
  need_contig(b, op, "b");
  bool ok = b.numel() == 1;
  if (!ok && b.rank() <= a.rank()) {
    ok = true;
    for (int i = 1; i <= b.rank(); ++i) ok = ok && b.size(-i) == a.size(-i);
  }
  TANDEM_NEED(ok, op,
              cat("b ", b.shape().to_string(), " does not broadcast to a ", a.shape().to_string()));
  kernels_for(y).binary(o, a, b, y, s);
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s) {
  const char* op = "embedding";
  need_defined(table, op, "table");
  need_defined(ids, op, "ids");
  need_defined(out, op, "out");
  same_device(op, out, {&table, &ids});
  TANDEM_NEED(is_weight_dtype(table.dtype()), op,
              cat("unsupported table dtype ", dtype_name(table.dtype())));
  TANDEM_NEED(
      table.rank() == 2 && ids.rank() == 1 && ids.dtype() == DType::kI32, op,
      cat("expects table [V, D] and i32 ids [T], got ", table.to_string(), ", ", ids.to_string()));
  need_f32(out, op, "out");
  need_contig(table, op, "table");
  need_contig(ids, op, "ids");
  need_contig(out, op, "out");
  TANDEM_NEED(
      out.rank() == 2 && out.size(0) == ids.size(0) && out.size(1) == table.size(1), op,
      cat("out must be [", ids.size(0), ", ", table.size(1), "], got ", out.shape().to_string()));
  kernels_for(out).embedding(table, ids, out, s);
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
               const AttentionParams& p, Tensor* probs, Stream* s) {
  const char* op = "attention";
  for (auto [t, n] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}}) {
    need_defined(*t, op, n);
    need_f32(*t, op, n);
    need_contig(*t, op, n);
    TANDEM_NEED(t->rank() == 3, op, cat(n, " must be [T, H, D], got ", t->shape().to_string()));
  }
  same_device(op, out, {&q, &k, &v});
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2), tk = k.size(0), hkv = k.size(1);
  TANDEM_NEED(k.size(2) == d, op, "q and k head dims differ");
  TANDEM_NEED(v.size(0) == tk && v.size(1) == hkv, op, "k and v disagree on tokens or heads");
  TANDEM_NEED(hkv > 0 && hq % hkv == 0, op,
              cat("query heads ", hq, " not a multiple of kv heads ", hkv));
  TANDEM_NEED(
      out.size(0) == tq && out.size(1) == hq && out.size(2) == v.size(2), op,
      cat("out must be [", tq, ", ", hq, ", ", v.size(2), "], got ", out.shape().to_string()));
  const int64_t q_offset = p.q_offset < 0 ? tk - tq : p.q_offset;
  TANDEM_NEED(!p.causal || q_offset >= 0, op,
              cat("causal attention with more queries (", tq, ") than keys (", tk, ")"));
  for (int64_t r : p.prob_rows)
    TANDEM_NEED(r >= 0 && r < tq, op, cat("prob row ", r, " outside [0, ", tq, ")"));
  if (!p.prob_rows.empty()) {
    TANDEM_NEED(probs && probs->defined(), op, "prob_rows given but no probs tensor");
    same_device(op, out, {probs});
    need_f32(*probs, op, "probs");
    need_contig(*probs, op, "probs");
    TANDEM_NEED((probs->shape() == Shape{hq, static_cast<int64_t>(p.prob_rows.size()), tk}), op,
                cat("probs must be [", hq, ", ", p.prob_rows.size(), ", ", tk, "], got ",
                    probs->shape().to_string()));
  }
  AttentionParams resolved = p;
  resolved.q_offset = q_offset;
  if (resolved.scale == 0.0f) resolved.scale = 1.0f / std::sqrt(static_cast<float>(d));
  kernels_for(out).attention(q, k, v, out, resolved, p.prob_rows.empty() ? nullptr : probs, s);
}

void OpKernels::quantized_paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                                          const QuantPagedKv& kv, Tensor& out, float scale,
                                          Stream* s) {
  (void)q, (void)q_positions, (void)kv, (void)scale, (void)s;
  throw Unsupported(cat("quantized_paged_attention: no kernel for tensors on ",
                        out.device().to_string(), " (CPU caches read codes in llm/kv_quant)"));
}

void paged_attention(const Tensor& q, std::span<const int32_t> q_positions, const PagedKv& kv,
                     Tensor& out, float scale, Stream* s) {
  const char* op = "paged_attention";
  for (auto [t, n] : {std::pair{&q, "q"}, {&out, "out"}}) {
    need_defined(*t, op, n);
    need_f32(*t, op, n);
    need_contig(*t, op, n);
    TANDEM_NEED(t->rank() == 3, op, cat(n, " must be [T, H, D], got ", t->shape().to_string()));
  }
  same_device(op, out, {&q});
  TANDEM_NEED(q.shape() == out.shape(), op,
              cat("q ", q.shape().to_string(), " and out ", out.shape().to_string(), " differ"));
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2);
  const auto hkv = static_cast<int64_t>(kv.heads.size());
  TANDEM_NEED(static_cast<int64_t>(q_positions.size()) == tq, op,
              cat(q_positions.size(), " query positions for ", tq, " queries"));
  TANDEM_NEED(hkv > 0 && hq % hkv == 0, op,
              cat("query heads ", hq, " not a multiple of kv heads ", hkv));
  for (int64_t h = 0; h < hkv; ++h) {
    for (size_t i = 0; i < kv.heads[h].size(); ++i) {
      const KvPage& pg = kv.heads[h][i];
      const std::string where = cat("kv head ", h, " page ", i);
      TANDEM_NEED(pg.k && pg.v && pg.k->defined() && pg.v->defined(), op,
                  where + ": k or v is missing");
      same_device(op, out, {pg.k, pg.v});
      for (const Tensor* t : {pg.k, pg.v}) {
        TANDEM_NEED(t->dtype() == DType::kF32 || t->dtype() == DType::kF16, op,
                    cat(where, ": pages must be f32 or f16, got ", dtype_name(t->dtype())));
        TANDEM_NEED(t->is_contiguous() && t->rank() == 2 && t->size(1) == d, op,
                    cat(where, ": rows must be contiguous [capacity, ", d, "], got ",
                        t->shape().to_string()));
      }
      TANDEM_NEED(pg.k->dtype() == pg.v->dtype() && pg.k->size(0) == pg.v->size(0), op,
                  where + ": k and v pages differ in dtype or capacity");
      TANDEM_NEED(pg.used >= 0 && pg.used <= pg.k->size(0), op,
                  cat(where, ": ", pg.used, " used slots of ", pg.k->size(0)));
      TANDEM_NEED(pg.used == 0 || pg.positions != nullptr, op, where + ": no positions");
    }
  }
  if (scale == 0.0f) scale = 1.0f / std::sqrt(static_cast<float>(d));
  kernels_for(out).paged_attention(q, q_positions, kv, out, scale, s);
}

int64_t embedding_bag_dim(const Tensor& table) {
  if (table.rank() != 2) return 0;
  return table.dtype() == DType::kU8 ? table.size(1) - 8 : table.size(1);
}

namespace {
int64_t index_at(const void* p, DType t, int64_t i) {
  return t == DType::kI64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}
}  // namespace

void check_embedding_bag_indices(const void* indices, DType index_dtype, int64_t n,
                                 const void* offsets, DType offset_dtype, int64_t bags,
                                 int64_t rows) {
  const char* op = "embedding_bag";
  TANDEM_NEED(index_at(offsets, offset_dtype, 0) == 0, op,
              cat("offsets[0] must be 0, got ", index_at(offsets, offset_dtype, 0)));
  for (int64_t b = 0; b < bags; ++b) {
    const int64_t lo = index_at(offsets, offset_dtype, b);
    const int64_t hi = index_at(offsets, offset_dtype, b + 1);
    TANDEM_NEED(hi >= lo, op, cat("offsets decrease at bag ", b, " (", lo, " then ", hi, ")"));
  }
  TANDEM_NEED(index_at(offsets, offset_dtype, bags) == n, op,
              cat("offsets[", bags, "] must equal the ", n, " indices, got ",
                  index_at(offsets, offset_dtype, bags)));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = index_at(indices, index_dtype, i);
    TANDEM_NEED(id >= 0 && id < rows, op,
                cat("index ", id, " at position ", i, " outside [0, ", rows, ")"));
  }
}

void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                   BagMode mode, Stream* s) {
  const char* op = "embedding_bag";
  need_defined(table, op, "table");
  need_defined(indices, op, "indices");
  need_defined(offsets, op, "offsets");
  need_defined(out, op, "out");
  same_device(op, out, {&table, &indices, &offsets});
  for (auto [t, n] :
       {std::pair{&table, "table"}, {&indices, "indices"}, {&offsets, "offsets"}, {&out, "out"}})
    need_contig(*t, op, n);
  TANDEM_NEED(
      table.dtype() == DType::kF32 || table.dtype() == DType::kF16 || table.dtype() == DType::kU8,
      op, cat("table must be f32, f16 or u8 (row-wise int8), got ", dtype_name(table.dtype())));
  TANDEM_NEED(table.rank() == 2, op, cat("table must be [rows, dim], got ", table.to_string()));
  const int64_t dim = embedding_bag_dim(table);
  TANDEM_NEED(
      dim >= 0, op,
      cat("a u8 (row-wise int8) table needs rows of dim + 8 bytes, got ", table.to_string()));
  for (auto [t, n] : {std::pair{&indices, "indices"}, {&offsets, "offsets"}}) {
    TANDEM_NEED(t->dtype() == DType::kI32 || t->dtype() == DType::kI64, op,
                cat(n, " must be i32 or i64, got ", dtype_name(t->dtype())));
    TANDEM_NEED(t->rank() == 1, op, cat(n, " must be rank 1, got ", t->shape().to_string()));
  }
  TANDEM_NEED(offsets.size(0) >= 1, op, "offsets needs bags + 1 >= 1 entries");
  need_f32(out, op, "out");
  const int64_t bags = offsets.size(0) - 1;
  TANDEM_NEED((out.shape() == Shape{bags, dim}), op,
              cat("out must be [", bags, ", ", dim, "], got ", out.shape().to_string()));
  TANDEM_NEED(mode == BagMode::kSum || mode == BagMode::kMean, op,
              cat("unknown pooling mode ", static_cast<int>(mode)));
  kernels_for(out).embedding_bag(table, indices, offsets, out, mode, s);
}

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  const char* op = "conv2d";
  TANDEM_NEED(x.rank() == 4 && w.rank() == 4, op,
              cat("x must be NCHW and w OIHW, got ", x.to_string(), ", ", w.to_string()));
  TANDEM_NEED(
      p.groups >= 1 && x[1] % p.groups == 0 && w[0] % p.groups == 0 && w[1] * p.groups == x[1], op,
      cat("channels ", x[1], " / weight ", w.to_string(), " do not match groups ", p.groups));
  TANDEM_NEED(p.stride_h >= 1 && p.stride_w >= 1 && p.dilation_h >= 1 && p.dilation_w >= 1, op,
              "stride and dilation must be >= 1");
  TANDEM_NEED(p.pad_top >= 0 && p.pad_left >= 0 && p.pad_bottom >= 0 && p.pad_right >= 0, op,
              "negative padding");
  const int64_t eff_h = (w[2] - 1) * p.dilation_h + 1, eff_w = (w[3] - 1) * p.dilation_w + 1;
  const int64_t ih = x[2] + p.pad_top + p.pad_bottom, iw = x[3] + p.pad_left + p.pad_right;
  TANDEM_NEED(ih >= eff_h && iw >= eff_w, op,
              cat("kernel ", w.to_string(), " larger than padded input ", x.to_string()));
  return Shape{x[0], w[0], (ih - eff_h) / p.stride_h + 1, (iw - eff_w) / p.stride_w + 1};
}

void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const Conv2dParams& p,
            Stream* s) {
  const char* op = "conv2d";
  need_defined(x, op, "x");
  need_defined(w, op, "w");
  need_defined(y, op, "y");
  same_device(op, y, {&x, &w, &bias});
  for (auto [t, n] : {std::pair{&x, "x"}, {&w, "w"}, {&y, "y"}}) {
    need_f32(*t, op, n);
    need_contig(*t, op, n);
  }
  const Shape expect = conv2d_output_shape(x.shape(), w.shape(), p);
  TANDEM_NEED(y.shape() == expect, op,
              cat("y must be ", expect.to_string(), ", got ", y.shape().to_string()));
  if (bias.defined()) {
    need_f32(bias, op, "bias");
    TANDEM_NEED(bias.rank() == 1 && bias.size(0) == w.size(0), op,
                cat("bias must be [", w.size(0), "]"));
  }
  kernels_for(y).conv2d(x, w, bias, y, p, s);
}

void convert(const Tensor& src, Tensor& dst, Stream* s) {
  const char* op = "convert";
  need_defined(src, op, "src");
  need_defined(dst, op, "dst");
  same_device(op, dst, {&src});
  TANDEM_NEED(
      src.shape() == dst.shape(), op,
      cat("src ", src.shape().to_string(), " and dst ", dst.shape().to_string(), " differ"));
  need_contig(dst, op, "dst");
  TANDEM_NEED(src.dtype() == dst.dtype() || (!dtype_is_blocked(src.dtype()) || src.is_contiguous()),
              op, "a strided block-quantized source can only be copied, not converted");
  if (dtype_is_k_quant(dst.dtype()) && src.dtype() != dst.dtype()) {
    throw Unsupported(cat("convert: quantizing ", dtype_name(src.dtype()), " to ",
                          dtype_name(dst.dtype()),
                          " is not supported (K-quants are read-only weight formats)"));
  }
  kernels_for(dst).convert(src, dst, s);
}

}  // namespace tandem::ops
#undef TANDEM_NEED
