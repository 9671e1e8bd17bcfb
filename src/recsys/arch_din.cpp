// SPDX-License-Identifier: Apache-2.0
// DIN (Zhou et al. 2018): the candidate c and behaviours s_l from the item tables, attention
// weights a_l = att([s_l, c, s_l - c, s_l * c]) (no softmax), u = sum_l a_l s_l, score =
// sigmoid(top([dense, user bags, u, c])). Its config keys, weights and op nodes.
#include <algorithm>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

using namespace parts;

// "att_in" [rows * L, 4 di]: [s_l, c, s_l - c, s_l * c] per behaviour.
int attention_input(RecModel::Impl& m, int snode, int cnode) {
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len;
  NodeDef n = node("att_in", "elementwise", {snode, cnode});
  n.cost = [di, L](int64_t q) {
    return io_node("att_in", "elementwise", double(2 * q * L * di), double((q * L + q) * di * kF),
                   double(4 * q * L * di * kF), Shape{q * L, 4 * di});
  };
  n.run = [snode, cnode, di, L](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows * L, 4 * di});
    const float* s = st.values[snode].data<float>();
    const float* cc = st.values[cnode].data<float>();
    float* o = out.data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < L; ++l) {
        const float* sv = s + (r * L + l) * di;
        const float* cv = cc + r * di;
        float* ov = o + (r * L + l) * 4 * di;
        for (int64_t e = 0; e < di; ++e) {
          ov[e] = sv[e];
          ov[di + e] = cv[e];
          ov[2 * di + e] = sv[e] - cv[e];
          ov[3 * di + e] = sv[e] * cv[e];
        }
      }
    return out;
  };
  // Device: c repeated over the L behaviours by a batched GEMM with a column of ones (exact: one
  // product 1 * c per element), then s - c and s * c elementwise, then the concatenation.
  n.run_dev = [snode, cnode, di, L](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    const Tensor& s = st.values[snode];
    const Device dev = s.device();
    const std::vector<float> ones(static_cast<size_t>(rows * L), 1.0f);
    Tensor c = Tensor::empty({rows, L, di}, DType::kF32, dev);
    ops::batched_gemm(dev_upload(ones.data(), {rows, L, 1}, dev, strm),
                      st.values[cnode].reshape({rows, 1, di}), c, {}, strm);
    Tensor diff = Tensor::empty({rows, L, di}, DType::kF32, dev);
    Tensor prod = Tensor::empty({rows, L, di}, DType::kF32, dev);
    ops::binary(ops::BinaryOp::kSub, s, c, diff, strm);
    ops::mul(s, c, prod, strm);
    return dev_concat({&s, &c, &diff, &prod}, rows * L, strm);
  };
  return m.add(std::move(n));
}

// "att_pool" [rows, di]: u = sum_l a_l s_l.
int attention_pool(RecModel::Impl& m, int score, int snode) {
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len;
  NodeDef n = node("att_pool", "weighted_sum", {score, snode});
  n.cost = [di, L](int64_t q) {
    return io_node("att_pool", "weighted_sum", double(2 * q * L * di),
                   double(q * L * (di + 1) * kF), double(q * di * kF), Shape{q, di});
  };
  n.run = [score, snode, di, L](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, di});
    const float* a = st.values[score].data<float>();
    const float* s = st.values[snode].data<float>();
    float* o = out.data<float>();
    std::fill(o, o + rows * di, 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t l = 0; l < L; ++l)
        for (int64_t e = 0; e < di; ++e) o[r * di + e] += a[r * L + l] * s[(r * L + l) * di + e];
    return out;
  };
  // u[r] = a[r] (as [1, L]) @ s[r] ([L, di]): one batched GEMM over the rows.
  n.run_dev = [score, snode, di, L](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    Tensor out = Tensor::empty({rows, 1, di}, DType::kF32, st.values[snode].device());
    if (rows > 0)
      ops::batched_gemm(st.values[score].reshape({rows, 1, L}),
                        st.values[snode].reshape({rows, L, di}), out, {}, strm);
    return out.reshape({rows, di});
  };
  return m.add(std::move(n));
}

std::vector<int64_t> attention_widths(const ModelConfig& c) {
  std::vector<int64_t> w = c.attention_mlp;
  w.push_back(1);
  return w;
}

int64_t din_top_input_width(const ModelConfig& c) {
  return c.dense_features + user_width(c) + 2 * c.item_dim();
}

void build_din(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  const int64_t di = c.item_dim();
  std::vector<int> ins = user_front(m);
  const int cnode = candidate_items(m);
  const int snode = behaviour_items(m);
  const int ain = attention_input(m, snode, cnode);
  const int score = mlp(m, "att", ain, 4 * di, attention_widths(c), false, c.seq_len);
  ins.push_back(attention_pool(m, score, snode));
  ins.push_back(cnode);
  const int top_in = concat(m, "top_in", ins, din_top_input_width(c));
  sigmoid_out(m, {mlp(m, "top", top_in, din_top_input_width(c), c.top_mlp, false, 1)});
}

std::shared_ptr<const Architecture> din() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kDin;
  a->title = "DIN";
  a->sequence = true;
  a->keys = {"item_tables", "seq_len", "attention_mlp"};
  a->read = [](const detail::JsonField& f, int64_t dim, ModelConfig& c) {
    read_sequence(f, dim, c);
    c.attention_mlp = widths(f.at("attention_mlp"));
  };
  a->write = [](const ModelConfig& c, nlohmann::json& j) {
    write_sequence(c, j);
    j["attention_mlp"] = c.attention_mlp;
  };
  a->top_input_width = din_top_input_width;
  a->weights = [](const ModelConfig& c, std::vector<WeightSpec>& out) {
    add_mlp_weights(out, "att", 4 * c.item_dim(), attention_widths(c));
  };
  a->build = build_din;
  return a;
}

const Registration kDinRegistration(architectures(), "din", din());

}  // namespace
}  // namespace tandem::rec
