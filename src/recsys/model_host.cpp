// SPDX-License-Identifier: Apache-2.0
// The CPU side of the model nodes (node_parts.cpp, arch_*.cpp): pooled lookups over the embedding
// store split into chunks over the CPU threads, item gathers, row-wise concatenation and linear
// layers.
#include <algorithm>
#include <cstring>

#include "kernels/parallel.h"
#include "recsys/model_impl.h"
#include "tandem/core/backend.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

// Values per query row of a node output (outputs may hold several rows per query row, as BST's
// [rows * T, d]).
int64_t row_width(const Tensor& t, int64_t rows) { return rows == 0 ? 0 : t.numel() / rows; }

int threads_for(int max_threads, int64_t bytes) {
  const int avail = max_threads > 0 ? max_threads : cpu_num_threads();
  return cpu::parallel_threads(0, bytes, avail);
}

}  // namespace

// Pooled lookups of `rows` bags of one table into out (row stride `stride`).
void lookup_bags(const EmbeddingTable& t, bool hashed, uint64_t salt, const int64_t* ids,
                 const int64_t* offsets, int64_t rows, Pooling mode, float* out, int64_t stride,
                 HotRowCache* cache, int max_threads) {
  const int64_t chunk = 64;
  const int64_t chunks = (rows + chunk - 1) / chunk;
  const int64_t bytes = (offsets[rows] - offsets[0]) * t.dim() * 4;
  cpu::parallel_for(chunks, threads_for(max_threads, bytes), [&](int64_t c, int) {
    const int64_t b0 = c * chunk, n = std::min(chunk, rows - b0);
    if (hashed)
      t.pooled_lookup_hashed(ids, offsets + b0, n, salt, mode, out + b0 * stride, stride, cache);
    else
      t.pooled_lookup(ids, offsets + b0, n, mode, out + b0 * stride, stride, cache);
  });
}

// out [n, sum of widths] = concat over item tables of row(ids_k[i]).
void gather_items(const std::vector<EmbeddingTable>& tabs, const std::vector<TableConfig>& cfgs,
                  const std::vector<std::vector<int64_t>>& ids, int64_t n, float* out,
                  int64_t stride, int max_threads) {
  std::vector<int64_t> off(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) off[i] = i;
  int64_t col = 0;
  for (size_t k = 0; k < tabs.size(); ++k) {
    lookup_bags(tabs[k], cfgs[k].hash, table_salt(cfgs[k].name), ids[k].data(), off.data(), n,
                Pooling::kSum, out + col, stride, nullptr, max_threads);
    col += tabs[k].dim();
  }
}

// Concatenates per-row outputs (each flattened after dim 0) into [rows, sum of widths].
Tensor concat_rows(const std::vector<const Tensor*>& parts, int64_t rows) {
  int64_t width = 0;
  for (const Tensor* p : parts) width += row_width(*p, rows);
  Tensor out = node_output({rows, width});
  float* o = out.data<float>();
  int64_t col = 0;
  for (const Tensor* p : parts) {
    const int64_t w = row_width(*p, rows);
    const float* s = p->data<float>();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(o + r * width + col, s + r * w, sizeof(float) * w);
    col += w;
  }
  return out;
}

// y [n, out] = x [n, in] W^T + b (+ residual) (ReLU when relu).
Tensor linear(const Tensor& x2d, const Tensor& w, const Tensor& b, bool relu,
              const Tensor* residual) {
  const int64_t n = x2d.size(0), out = w.size(0);
  Tensor y = node_output({n, out});
  if (n == 0) return y;
  ops::gemm(x2d, w, y, {.trans_b = true});
  ops::add(y, b, y);
  if (residual) ops::add(y, residual->reshape({n, out}), y);
  if (relu) ops::unary(ops::UnaryOp::kRelu, y, y);
  return y;
}

}  // namespace tandem::rec
