// SPDX-License-Identifier: Apache-2.0
// BST (Chen et al. 2019): X = [s_1..s_L, c] + pos, one post-LN transformer block H = LN1(X +
// MHA(X)), Y = LN2(H + W2 ReLU(W1 H)), score = sigmoid(top([dense, user bags, flatten(Y)])). Its
// config keys, weights and op nodes.
#include "recsys/architecture.h"
#include "recsys/node_parts.h"

namespace tandem::rec {
namespace {

using namespace parts;

int64_t bst_top_input_width(const ModelConfig& c) {
  return c.dense_features + user_width(c) + (c.seq_len + 1) * c.item_dim();
}

void build_bst(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  const int64_t T = c.seq_len + 1;
  std::vector<int> ins = user_front(m);
  const int x = item_sequence(m, true);
  ins.push_back(transformer_block(m, x, T));
  const int top_in = concat(m, "top_in", ins, bst_top_input_width(c));
  sigmoid_out(m, {mlp(m, "top", top_in, bst_top_input_width(c), c.top_mlp, false, 1)});
}

void weights(const ModelConfig& c, std::vector<WeightSpec>& out) {
  const int64_t di = c.item_dim(), T = c.seq_len + 1;
  out.push_back({"pos_emb", Shape{T, di}, 0.1f, 0.0f});
  add_block_weights(out, di, c.ffn_dim);
}

std::shared_ptr<const Architecture> bst() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kBst;
  a->title = "BST";
  a->sequence = true;
  a->keys = {"item_tables", "seq_len", "heads", "ffn_dim"};
  a->read = read_block;
  a->write = write_block;
  a->top_input_width = bst_top_input_width;
  a->weights = weights;
  a->build = build_bst;
  return a;
}

const Registration kBstRegistration(architectures(), "bst", bst());

}  // namespace
}  // namespace tandem::rec
