// SPDX-License-Identifier: Apache-2.0
// Fast attention: blocked, multithreaded, online softmax. Work items are (KV head, block of
// kQueryBlock query rows); an item walks the key blocks once for all query heads of its KV group
// (GQA: K and V rows are loaded once per group), keeping a running max, sum and unnormalised output
// per row (ISA attention_rows). Causal items stop at the last key their last row can see. When
// there are fewer such items than threads (decode with few KV heads), items are (query head, block)
// instead. Probability rows (p.prob_rows) are computed exactly in a second pass: scores of every
// visible key, softmax, zeros at masked keys.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fast_ops.h"
#include "isa.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"

namespace tandem::cpu::fast {
namespace {

constexpr int64_t kQueryBlock = 16;

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
               const ops::AttentionParams& p, const Tensor* probs) {
  AttnArgs a{};
  a.q = q.data<float>();
  a.k = k.data<float>();
  a.v = v.data<float>();
  a.out = out.data<float>();
  a.tq = q.size(0), a.hq = q.size(1), a.d = q.size(2);
  a.tk = k.size(0), a.hkv = k.size(1), a.dv = v.size(2);
  a.scale = p.scale;
  a.causal = p.causal;
  a.q_offset = p.q_offset;
  const int64_t group = a.hq / a.hkv, qblocks = (a.tq + kQueryBlock - 1) / kQueryBlock;
  // Work: scores and weighted sums over the visible keys (about half of them when causal) for
  // every query row and head; small problems (short decode contexts) stay on this thread.
  const int64_t keys = a.causal ? std::min(a.tk, a.q_offset + (a.tq + 1) / 2 + 1) : a.tk;
  const int64_t macs = a.tq * a.hq * std::max<int64_t>(keys, 1) * (a.d + a.dv);
  const int64_t bytes = 4 * (a.tq * a.hq * (a.d + a.dv) + a.tk * a.hkv * (a.d + a.dv));
  const int threads = parallel_threads(macs, bytes, cpu_num_threads());
  const IsaKernels& isa_k = isa();

  // Heads per item: the whole KV group, or one head when that leaves threads idle.
  const int64_t heads_per_item = a.hkv * qblocks >= threads ? group : 1;
  const int64_t head_items = a.hq / heads_per_item, items = head_items * qblocks;
  const int64_t scratch_floats = heads_per_item * kQueryBlock * (a.dv + 2) + kAttnKeyBlock;
  std::vector<std::vector<float>> scratch(team_size(items, threads));
  // Later query blocks see more keys under causal masking: hand them out first.
  parallel_for(items, threads, [&](int64_t it, int th) {
    std::vector<float>& s = scratch[th];
    if (s.empty()) s.resize(static_cast<size_t>(scratch_floats));
    const int64_t qb = qblocks - 1 - it / head_items, h0 = (it % head_items) * heads_per_item;
    const int64_t i0 = qb * kQueryBlock, i1 = std::min(a.tq, i0 + kQueryBlock);
    isa_k.attention_rows(a, h0, h0 + heads_per_item, i0, i1, s.data());
  });

  if (!probs || p.prob_rows.empty()) return;
  const int64_t nrows = static_cast<int64_t>(p.prob_rows.size());
  float* pp = probs->data<float>();
  parallel_for(a.hq * nrows, threads, [&](int64_t it, int) {
    const int64_t h = it / nrows, r = it % nrows, i = p.prob_rows[r], g = h / group;
    const int64_t visible = a.causal ? std::min(a.tk, a.q_offset + i + 1) : a.tk;
    float* row = pp + (h * nrows + r) * a.tk;
    const float* qr = a.q + (i * a.hq + h) * a.d;
    float mx = -INFINITY;
    for (int64_t j = 0; j < visible; ++j) {
      row[j] = isa_k.dot(qr, a.k + (j * a.hkv + g) * a.d, a.d) * a.scale;
      mx = std::max(mx, row[j]);
    }
    if (visible > 0) {
      const float sum = isa_k.exp_sub_sum(row, mx, row, visible);
      isa_k.scale(1.0f / sum, row, visible);
    }
    std::fill(row + std::max<int64_t>(visible, 0), row + a.tk, 0.0f);
  });
}

}  // namespace tandem::cpu::fast
