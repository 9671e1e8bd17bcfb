// SPDX-License-Identifier: Apache-2.0
// SASRec (Kang and McAuley 2018), the retrieval baseline of RecFlow: the behaviours s_1..s_L plus a
// position embedding go through one post-LN transformer block (the BST block, node_parts.h); the
// user vector u is the block's output at the last position, and score = sigmoid(top(u * c)) with c
// the candidate's item embedding (top_mlp [1]: a learned weighted inner product of u and c).
// SASRec's attention is causal; with one block and only the last position read, the causal mask
// changes nothing (the last position sees every behaviour), so the block runs unmasked. Its config
// keys, weights and op nodes.
#include <cstring>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"

namespace tandem::rec {
namespace {

using namespace parts;

// "user" [rows, di]: the block's output at the last of the L positions.
int last_position(RecModel::Impl& m, int y) {
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len;
  NodeDef n = node("user", "slice", {y});
  n.cost = [di](int64_t q) {
    return io_node("user", "slice", 0, double(q * di * kF), double(q * di * kF), Shape{q, di});
  };
  n.run = [y, di, L](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, di});
    const float* src = st.values[y].data<float>();
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.data<float>() + r * di, src + (r * L + L - 1) * di, sizeof(float) * di);
    return out;
  };
  n.run_dev = [y, di, L](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    const Tensor last = st.values[y].reshape({rows, L * di}).slice(1, (L - 1) * di, L * di);
    return dev_contiguous(last, strm).reshape({rows, di});
  };
  return m.add(std::move(n));
}

void build_sasrec(RecModel::Impl& m) {
  const int64_t di = m.cfg.item_dim();
  const int x = item_sequence(m, false);
  const int user = last_position(m, transformer_block(m, x, m.cfg.seq_len));
  const int both = product(m, "match", user, candidate_items(m), di);
  sigmoid_out(m, {mlp(m, "top", both, di, m.cfg.top_mlp, false, 1)});
}

std::shared_ptr<const Architecture> sasrec() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kSasrec;
  a->title = "SASRec";
  a->sequence = true;
  a->keys = {"item_tables", "seq_len", "heads", "ffn_dim"};
  a->read = [](const detail::JsonField& f, int64_t dim, ModelConfig& c) {
    read_block(f, dim, c);
    if (c.dense_features > 0 || !c.tables.empty() || !c.bottom_mlp.empty())
      f.at("tables").fail(
          "SASRec reads only the behaviour sequence and the candidate: no "
          "dense_features, bottom_mlp or pooled tables");
  };
  a->write = write_block;
  a->top_input_width = [](const ModelConfig& c) { return c.item_dim(); };
  a->weights = [](const ModelConfig& c, std::vector<WeightSpec>& out) {
    out.push_back({"pos_emb", Shape{c.seq_len, c.item_dim()}, 0.1f, 0.0f});
    add_block_weights(out, c.item_dim(), c.ffn_dim);
  };
  a->build = build_sasrec;
  return a;
}

const Registration kSasrecRegistration(architectures(), "sasrec", sasrec());

}  // namespace
}  // namespace tandem::rec
