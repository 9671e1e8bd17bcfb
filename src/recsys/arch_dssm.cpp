// SPDX-License-Identifier: Apache-2.0
// DSSM (Huang et al. 2013), two towers, the pre-rank / coarse-rank baseline of RecFlow: the user
// tower reads [dense, user bags, mean over l of s_l] and the item tower the candidate's item
// embedding c, both MLPs of tower_mlp widths (hidden ReLU, the last layer linear); score =
// sigmoid(top(u * v)) (top_mlp [1]: a learned weighted inner product of the towers' outputs). Its
// config keys, weights and op nodes.
#include <algorithm>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

using namespace parts;

// "seq_mean" [rows, di]: the mean of each row's L behaviour embeddings ("seq" [rows, L, di]).
int behaviour_mean(RecModel::Impl& m, int seq) {
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len;
  NodeDef n = node("seq_mean", "weighted_sum", {seq});
  n.cost = [di, L](int64_t q) {
    return io_node("seq_mean", "weighted_sum", double(q * L * di), double(q * L * di * kF),
                   double(q * di * kF), Shape{q, di});
  };
  n.run = [seq, di, L](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, di});
    float* o = out.data<float>();
    std::fill(o, o + rows * di, 0.0f);
    const float* s = st.values[seq].data<float>();
    const float w = 1.0f / static_cast<float>(L);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < di; ++e) o[r * di + e] += w * s[(r * L + l) * di + e];
    return out;
  };
  // mean[r] = (1/L, ..., 1/L) [1, L] @ s[r] [L, di]: one batched GEMM over the rows.
  n.run_dev = [seq, di, L](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    const Device dev = st.values[seq].device();
    const std::vector<float> w(static_cast<size_t>(rows * L), 1.0f / static_cast<float>(L));
    Tensor out = Tensor::empty({rows, 1, di}, DType::kF32, dev);
    ops::batched_gemm(dev_upload(w.data(), {rows, 1, L}, dev, strm),
                      st.values[seq].reshape({rows, L, di}), out, {}, strm);
    return out.reshape({rows, di});
  };
  return m.add(std::move(n));
}

int64_t user_tower_input(const ModelConfig& c) {
  return c.dense_features + user_width(c) + c.item_dim();
}

void build_dssm(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  std::vector<int> ins = user_front(m);
  ins.push_back(behaviour_mean(m, behaviour_items(m)));
  const int uin = concat(m, "user_in", ins, user_tower_input(c));
  const int u = mlp(m, "user_tower", uin, user_tower_input(c), c.tower_mlp, false, 1);
  const int v = mlp(m, "item_tower", candidate_items(m), c.item_dim(), c.tower_mlp, false, 1);
  const int both = product(m, "match", u, v, c.tower_mlp.back());
  sigmoid_out(m, {mlp(m, "top", both, c.tower_mlp.back(), c.top_mlp, false, 1)});
}

std::shared_ptr<const Architecture> dssm() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kDssm;
  a->title = "DSSM";
  a->sequence = true;
  a->keys = {"item_tables", "seq_len", "tower_mlp"};
  a->read = [](const detail::JsonField& f, int64_t dim, ModelConfig& c) {
    read_sequence(f, dim, c);
    c.tower_mlp = widths(f.at("tower_mlp"));
    if (c.tower_mlp.empty()) f.at("tower_mlp").fail("need at least one layer");
    if (!c.bottom_mlp.empty())
      f.at("bottom_mlp").fail("DSSM feeds the dense features to the user tower: no bottom_mlp");
  };
  a->write = [](const ModelConfig& c, nlohmann::json& j) {
    write_sequence(c, j);
    j["tower_mlp"] = c.tower_mlp;
  };
  a->top_input_width = [](const ModelConfig& c) { return c.tower_mlp.back(); };
  a->weights = [](const ModelConfig& c, std::vector<WeightSpec>& out) {
    add_mlp_weights(out, "user_tower", user_tower_input(c), c.tower_mlp);
    add_mlp_weights(out, "item_tower", c.item_dim(), c.tower_mlp);
  };
  a->build = build_dssm;
  return a;
}

const Registration kDssmRegistration(architectures(), "dssm", dssm());

}  // namespace
}  // namespace tandem::rec
