// SPDX-License-Identifier: Apache-2.0
// BST (Chen et al. 2019): X = [s_1..s_L, c] + pos, one post-LN transformer block H = LN1(X +
// MHA(X)), Y = LN2(H + W2 ReLU(W1 H)), score = sigmoid(top([dense, user bags, flatten(Y)])). Its
// config keys, weights and op nodes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

using namespace parts;

// Item ids of the T = L + 1 positions of each row: the behaviours at 0..L-1, the candidate at L.
std::vector<std::vector<int64_t>> positions(const QueryInputs& in, size_t tables, int64_t L) {
  const int64_t rows = in.rows, T = L + 1;
  std::vector<std::vector<int64_t>> ids(tables);
  for (size_t k = 0; k < tables; ++k) {
    ids[k].resize(static_cast<size_t>(rows * T));
    for (int64_t r = 0; r < rows; ++r) {
      std::copy_n(in.seq_ids[k].begin() + r * L, L, ids[k].begin() + r * T);
      ids[k][r * T + L] = in.item_ids[k][r];
    }
  }
  return ids;
}

// "seq" [rows, T, di]: the items of every position plus the position embedding.
int sequence(RecModel::Impl& m) {
  const std::vector<TableConfig> itc = m.cfg.item_tables;
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len, T = L + 1;
  const int64_t item_bytes = item_row_bytes(m.cfg);
  RecModel::Impl* self = &m;
  NodeDef n = node("seq", "emb_gather");
  n.cost = [di, T, item_bytes](int64_t q) {
    return io_node("seq", "emb_gather", double(q * T * di), double(q * T * item_bytes),
                   double(q * T * di * kF), Shape{q, T, di});
  };
  n.run = [self, itc, di, L, T](const QueryState& st, int mt) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, T, di});
    float* o = out.data<float>();
    gather_items(self->item_tables, itc, positions(*st.inputs, itc.size(), L), rows * T, o, di, mt);
    const float* pos = self->w("pos_emb").data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < T * di; ++i) o[r * T * di + i] += pos[i];
    return out;
  };
  n.run_dev = [self, itc, di, L, T](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    Tensor out = dev_gather_items(self->dev_item_tables, itc, positions(*st.inputs, itc.size(), L),
                                  rows * T, strm)
                     .reshape({rows, T, di});
    ops::add(out, self->dw("pos_emb").reshape({T, di}), out, strm);
    return out;
  };
  return m.add(std::move(n));
}

// "mha" [rows * T, di]: multi-head self-attention of each row's T positions (not causal).
int self_attention(RecModel::Impl& m, int qkv) {
  const int64_t T = m.cfg.seq_len + 1, H = m.cfg.heads, dh = m.cfg.item_dim() / H;
  NodeDef n = node("mha", "attention", {qkv});
  n.cost = [T, H, dh](int64_t q) {
    OpNode g = make_attention_node(
        "mha", {.tq = T, .tk = T, .hq = H, .hkv = H, .head_dim = dh, .causal = false});
    g.flops *= double(q);
    g.bytes_read *= double(q);
    g.bytes_written *= double(q);
    g.output_shapes = {Shape{q * T, H * dh}};
    return g;
  };
  n.run = [qkv, T, H, dh](const QueryState& st, int) {
    const int64_t rows = rows_of(st), d = H * dh;
    const float* src = st.values[qkv].data<float>();
    Tensor out = node_output({rows * T, d});
    Tensor q = Tensor::empty({T, H, dh}, DType::kF32), k = Tensor::empty({T, H, dh}, DType::kF32),
           v = Tensor::empty({T, H, dh}, DType::kF32), o = Tensor::empty({T, H, dh}, DType::kF32);
    ops::AttentionParams p;
    p.causal = false;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t t = 0; t < T; ++t) {
        const float* row = src + (r * T + t) * 3 * d;
        std::memcpy(q.data<float>() + t * d, row, sizeof(float) * d);
        std::memcpy(k.data<float>() + t * d, row + d, sizeof(float) * d);
        std::memcpy(v.data<float>() + t * d, row + 2 * d, sizeof(float) * d);
      }
      ops::attention(q, k, v, o, p);
      std::memcpy(out.data<float>() + r * T * d, o.data<float>(), sizeof(float) * T * d);
    }
    return out;
  };
  // Per row: q, k, v are column blocks of the row's [T, 3d] projections (made contiguous), the
  // attention writes the row's block of the output in place.
  n.run_dev = [qkv, T, H, dh](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st), d = H * dh;
    const Tensor& src = st.values[qkv];
    Tensor out = Tensor::empty({rows * T, d}, DType::kF32, src.device());
    ops::AttentionParams p;
    p.causal = false;
    for (int64_t r = 0; r < rows; ++r) {
      const Tensor row = src.slice(0, r * T, (r + 1) * T);
      Tensor part[3];
      for (int i = 0; i < 3; ++i)
        part[i] = dev_contiguous(row.slice(1, i * d, (i + 1) * d), strm).reshape({T, H, dh});
      Tensor o = out.slice(0, r * T, (r + 1) * T).reshape({T, H, dh});
      ops::attention(part[0], part[1], part[2], o, p, nullptr, strm);
    }
    return out;
  };
  return m.add(std::move(n));
}

// "name" = in_node W^T + b + res_node (weights wname.weight, wname.bias), over T rows per row.
int residual_linear(RecModel::Impl& m, const std::string& name, const std::string& wname,
                    int in_node, int res_node, int64_t in, int64_t out) {
  const int64_t T = m.cfg.seq_len + 1;
  RecModel::Impl* self = &m;
  NodeDef n = node(name, "mlp", {in_node, res_node});
  n.cost = [name, in, out, T](int64_t q) {
    OpNode g = make_gemm_node(name, q * T, out, in);
    g.kind = "mlp";
    g.flops += 2.0 * double(q * T * out);
    g.bytes_read += double(q * T * out * kF + out * kF);
    return g;
  };
  n.run = [self, wname, in_node, res_node, in](const QueryState& st, int) {
    const Tensor& xin = st.values[in_node];
    return linear(xin.reshape({xin.numel() / in, in}), self->w(wname + ".weight"),
                  self->w(wname + ".bias"), false, &st.values[res_node]);
  };
  n.run_dev = [self, wname, in_node, res_node, in](const QueryState& st, Stream* strm) {
    const Tensor& xin = st.values[in_node];
    return dev_linear(xin.reshape({xin.numel() / in, in}), self->dw(wname + ".weight"),
                      self->dw(wname + ".bias"), false, &st.values[res_node], strm);
  };
  return m.add(std::move(n));
}

// "name" [rows * T, di]: layer norm of each position (weights name.weight, name.bias).
int norm(RecModel::Impl& m, const std::string& name, int in_node) {
  const int64_t T = m.cfg.seq_len + 1, di = m.cfg.item_dim();
  RecModel::Impl* self = &m;
  NodeDef n = node(name, "layer_norm", {in_node});
  n.cost = [name, T, di](int64_t q) {
    return make_norm_node(name, "layer_norm", Shape{q * T, di});
  };
  n.run = [self, name, in_node, di](const QueryState& st, int) {
    const Tensor& xin = st.values[in_node];
    Tensor y = node_output({xin.numel() / di, di});
    ops::layer_norm(xin.reshape({xin.numel() / di, di}), self->w(name + ".weight"),
                    self->w(name + ".bias"), y);
    return y;
  };
  n.run_dev = [self, name, in_node, di](const QueryState& st, Stream* strm) {
    const Tensor& xin = st.values[in_node];
    Tensor y = Tensor::empty({xin.numel() / di, di}, DType::kF32, xin.device());
    ops::layer_norm(xin.reshape({xin.numel() / di, di}), self->dw(name + ".weight"),
                    self->dw(name + ".bias"), y, {}, strm);
    return y;
  };
  return m.add(std::move(n));
}

int64_t bst_top_input_width(const ModelConfig& c) {
  return c.dense_features + user_width(c) + (c.seq_len + 1) * c.item_dim();
}

void build_bst(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  const int64_t di = c.item_dim(), T = c.seq_len + 1;
  std::vector<int> ins = user_front(m);
  const int x = sequence(m);
  const int qkv = mlp(m, "attn.in_proj", x, di, {3 * di}, false, T);
  m.nodes[qkv].name = "qkv";  // the weights keep the names attn.in_proj.0.{weight,bias}
  const int att = self_attention(m, qkv);
  const int a_out = residual_linear(m, "attn_out", "attn.out_proj", att, x, di, di);
  const int h1 = norm(m, "ln1", a_out);
  const int f1 = mlp(m, "ffn", h1, di, {c.ffn_dim}, true, T);
  const int f2 = residual_linear(m, "ffn_out", "ffn.1", f1, h1, c.ffn_dim, di);
  ins.push_back(norm(m, "ln2", f2));
  const int top_in = concat(m, "top_in", ins, bst_top_input_width(c));
  sigmoid_out(m, {mlp(m, "top", top_in, bst_top_input_width(c), c.top_mlp, false, 1)});
}

void weights(const ModelConfig& c, std::vector<WeightSpec>& out) {
  const int64_t di = c.item_dim(), T = c.seq_len + 1;
  out.push_back({"pos_emb", Shape{T, di}, 0.1f, 0.0f});
  add_mlp_weights(out, "attn.in_proj", di, {3 * di});
  const float s = 1.0f / std::sqrt(static_cast<float>(di));
  out.push_back({"attn.out_proj.weight", Shape{di, di}, s, 0.0f});
  out.push_back({"attn.out_proj.bias", Shape{di}, s, 0.0f});
  for (const char* ln : {"ln1", "ln2"}) {
    out.push_back({cat(ln, ".weight"), Shape{di}, 0.1f, 1.0f});
    out.push_back({cat(ln, ".bias"), Shape{di}, 0.1f, 0.0f});
  }
  add_mlp_weights(out, "ffn", di, {c.ffn_dim, di});
}

void read_bst(const detail::JsonField& f, int64_t dim, ModelConfig& c) {
  read_sequence(f, dim, c);
  c.heads = bounded(f.at("heads"), 1024);
  c.ffn_dim = bounded(f.at("ffn_dim"), kMaxWidth);
  if (c.item_dim() % c.heads != 0)
    f.at("heads").fail(
        cat("the item width ", c.item_dim(), " is not a multiple of ", c.heads, " heads"));
}

std::shared_ptr<const Architecture> bst() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kBst;
  a->title = "BST";
  a->sequence = true;
  a->keys = {"item_tables", "seq_len", "heads", "ffn_dim"};
  a->read = read_bst;
  a->write = [](const ModelConfig& c, nlohmann::json& j) {
    write_sequence(c, j);
    j["heads"] = c.heads;
    j["ffn_dim"] = c.ffn_dim;
  };
  a->top_input_width = bst_top_input_width;
  a->weights = weights;
  a->build = build_bst;
  return a;
}

const Registration kBstRegistration(architectures(), "bst", bst());

}  // namespace
}  // namespace tandem::rec
