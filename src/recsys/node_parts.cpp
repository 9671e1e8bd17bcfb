// SPDX-License-Identifier: Apache-2.0
// The op nodes several architectures share: dense input, embedding bags, MLP layers, concatenation,
// the sigmoid output and the transformer block of the sequence models (node_parts.h).
#include "recsys/node_parts.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::rec::parts {

NodeDef node(const std::string& name, const std::string& kind, std::vector<int> inputs) {
  NodeDef n;
  n.name = name;
  n.kind = kind;
  n.inputs = std::move(inputs);
  return n;
}

OpNode io_node(const std::string& name, const std::string& kind, double flops, double read,
               double written, const Shape& out) {
  OpNode n;
  n.name = name;
  n.kind = kind;
  n.flops = flops;
  n.bytes_read = read;
  n.bytes_written = written;
  n.output_shapes = {out};
  return n;
}

int64_t table_elem_bytes(const ModelConfig& c) {
  return c.table_dtype == DType::kF32 ? 4 : c.table_dtype == DType::kF16 ? 2 : 1;
}

int64_t user_width(const ModelConfig& c) {
  int64_t w = 0;
  for (const auto& t : c.tables) w += t.dim;
  return w;
}

int64_t item_row_bytes(const ModelConfig& c) {
  int64_t b = 0;
  for (const auto& t : c.item_tables) b += t.dim * table_elem_bytes(c) + 8;
  return b;
}

int dense_input(RecModel::Impl& m) {
  const int64_t d = m.cfg.dense_features;
  RecModel::Impl* self = &m;
  NodeDef n = node("dense", "input");
  n.cost = [d](int64_t q) {
    return io_node("dense", "input", 0, 0, double(q * d * kF), Shape{q, d});
  };
  n.run = [d](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor t = node_output({rows, d});
    if (rows * d > 0) std::memcpy(t.raw_data(), st.inputs->dense.data(), sizeof(float) * rows * d);
    return t;
  };
  n.run_dev = [self, d](const QueryState& st, Stream* strm) {
    return dev_upload(st.inputs->dense.data(), {rows_of(st), d}, self->device, strm);
  };
  return m.add(std::move(n));
}

namespace {

int embedding_bag(RecModel::Impl& m, size_t t) {
  const TableConfig tc = m.cfg.tables[t];
  const int64_t elem_bytes = table_elem_bytes(m.cfg);
  const Pooling mode = m.cfg.pooling_mode;
  RecModel::Impl* self = &m;
  NodeDef n = node(tc.name, "emb_bag");
  n.cost = [tc, elem_bytes](int64_t q) {
    const double lookups = double(q * tc.pooling);
    OpNode g = io_node(tc.name, "emb_bag", lookups * double(tc.dim),
                       lookups * double(tc.dim * elem_bytes + 8), double(q * tc.dim * kF),
                       Shape{q, tc.dim});
    g.param_bytes = double(tc.rows * tc.dim * elem_bytes);
    g.attrs["rows"] = tc.rows;
    g.attrs["pooling"] = tc.pooling;
    return g;
  };
  n.run = [self, t, tc, mode](const QueryState& st, int max_threads) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, tc.dim});
    lookup_bags(self->tables[t], tc.hash, table_salt(tc.name), st.inputs->ids[t].data(),
                st.inputs->offsets[t].data(), rows, mode, out.data<float>(), tc.dim,
                self->caches.empty() ? nullptr : self->caches[t].get(), max_threads);
    return out;
  };
  n.rows = [t, tc](const QueryInputs& q) {
    const std::vector<int64_t>& ids = q.ids[t];
    const std::vector<int64_t> bag(ids.begin() + q.offsets[t].front(),
                                   ids.begin() + q.offsets[t].back());
    return std::vector<TableRows>{{static_cast<int>(t), rows_of_ids(tc, bag)}};
  };
  n.run_dev = [self, t, tc, mode](const QueryState& st, Stream* strm) {
    return dev_bags(self->dev_tables[t], tc.hash, table_salt(tc.name), st.inputs->ids[t].data(),
                    st.inputs->offsets[t].data(), rows_of(st), mode, strm);
  };
  return m.add(std::move(n));
}

// One linear layer "name" (weights name.weight, name.bias) over seq_rows rows per query row.
int linear_layer(RecModel::Impl& m, const std::string& name, int prev, int64_t in, int64_t out,
                 bool relu, int64_t seq_rows) {
  RecModel::Impl* self = &m;
  NodeDef n = node(name, "mlp", {prev});
  n.cost = [name, in, out, seq_rows](int64_t q) {
    OpNode g = make_gemm_node(name, q * seq_rows, out, in);
    g.kind = "mlp";
    g.flops += 2.0 * double(q * seq_rows * out);  // bias and activation
    g.bytes_read += double(out * kF);
    g.param_bytes += double(out * kF);
    return g;
  };
  n.run = [self, name, in, prev, relu](const QueryState& st, int) {
    const Tensor& x = st.values[prev];
    return linear(x.reshape({x.numel() / in, in}), self->w(name + ".weight"),
                  self->w(name + ".bias"), relu);
  };
  n.run_dev = [self, name, in, prev, relu](const QueryState& st, Stream* strm) {
    const Tensor& x = st.values[prev];
    return dev_linear(x.reshape({x.numel() / in, in}), self->dw(name + ".weight"),
                      self->dw(name + ".bias"), relu, nullptr, strm);
  };
  return m.add(std::move(n));
}

}  // namespace

std::vector<int> embedding_bags(RecModel::Impl& m) {
  std::vector<int> ids;
  for (size_t t = 0; t < m.cfg.tables.size(); ++t) ids.push_back(embedding_bag(m, t));
  return ids;
}

int mlp(RecModel::Impl& m, const std::string& prefix, int input, int64_t in,
        const std::vector<int64_t>& widths, bool relu_last, int64_t seq_rows) {
  int prev = input;
  for (size_t i = 0; i < widths.size(); ++i) {
    const bool relu = i + 1 < widths.size() || relu_last;
    prev = linear_layer(m, cat(prefix, '.', i), prev, in, widths[i], relu, seq_rows);
    in = widths[i];
  }
  return prev;
}

int concat(RecModel::Impl& m, const std::string& name, const std::vector<int>& inputs,
           int64_t width) {
  const std::vector<int> ins = inputs;
  NodeDef n = node(name, "concat", ins);
  n.cost = [name, width](int64_t q) {
    return io_node(name, "concat", 0, double(q * width * kF), double(q * width * kF),
                   Shape{q, width});
  };
  n.run = [ins](const QueryState& st, int) {
    std::vector<const Tensor*> parts;
    for (int i : ins) parts.push_back(&st.values[i]);
    return concat_rows(parts, rows_of(st));
  };
  n.run_dev = [ins](const QueryState& st, Stream* strm) {
    std::vector<const Tensor*> parts;
    for (int i : ins) parts.push_back(&st.values[i]);
    return dev_concat(parts, rows_of(st), strm);
  };
  return m.add(std::move(n));
}

int sigmoid_out(RecModel::Impl& m, const std::vector<int>& inputs) {
  const std::vector<int> ins = inputs;
  NodeDef n = node("out", "sigmoid", ins);
  n.cost = [](int64_t q) {
    return io_node("out", "sigmoid", double(4 * q), double(8 * q), double(4 * q), Shape{q, 1});
  };
  n.run = [ins](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, 1});
    float* o = out.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      float z = 0;
      for (int i : ins) z += st.values[i].data<float>()[r];
      o[r] = 1.0f / (1.0f + std::exp(-z));
    }
    return out;
  };
  // Device: z = sum of the inputs; sigmoid(z) = softmax([0, z])[1], so one softmax over [rows, 2]
  // rows and a column copy.
  n.run_dev = [ins](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    const Device dev = st.values[ins.front()].device();
    Tensor z = st.values[ins.front()].reshape({rows, 1});
    for (size_t k = 1; k < ins.size(); ++k) {
      Tensor sum = Tensor::empty({rows, 1}, DType::kF32, dev);
      ops::add(z, st.values[ins[k]].reshape({rows, 1}), sum, strm);
      z = sum;
    }
    const std::vector<float> zeros(static_cast<size_t>(rows), 0.0f);
    const Tensor zero = dev_upload(zeros.data(), {rows, 1}, dev, strm);
    Tensor pair = dev_concat({&zero, &z}, rows, strm);
    ops::softmax(pair, pair, strm);
    return dev_contiguous(pair.slice(1, 1, 2), strm);
  };
  return m.add(std::move(n));
}

std::vector<int> user_front(RecModel::Impl& m) {
  std::vector<int> front;
  if (m.cfg.dense_features > 0) front.push_back(dense_input(m));
  const std::vector<int> bags = embedding_bags(m);
  front.insert(front.end(), bags.begin(), bags.end());
  return front;
}

namespace {

// lookup_rows' number of the first item table (after the pooled tables).
int item_table_base(const RecModel::Impl& m) { return static_cast<int>(m.cfg.tables.size()); }

// The rows each item table reads for ids[k], numbered from `first`.
std::vector<TableRows> item_rows(const std::vector<TableConfig>& itc, int first,
                                 const std::vector<std::vector<int64_t>>& ids) {
  std::vector<TableRows> out;
  for (size_t k = 0; k < itc.size(); ++k)
    out.push_back({first + static_cast<int>(k), rows_of_ids(itc[k], ids[k])});
  return out;
}

}  // namespace

int candidate_items(RecModel::Impl& m) {
  const std::vector<TableConfig> itc = m.cfg.item_tables;
  const int64_t di = m.cfg.item_dim(), item_bytes = item_row_bytes(m.cfg);
  RecModel::Impl* self = &m;
  NodeDef n = node("cand", "emb_gather");
  n.cost = [di, item_bytes](int64_t q) {
    return io_node("cand", "emb_gather", 0, double(q * item_bytes), double(q * di * kF),
                   Shape{q, di});
  };
  n.run = [self, itc, di](const QueryState& st, int mt) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, di});
    gather_items(self->item_tables, itc, st.inputs->item_ids, rows, out.data<float>(), di, mt);
    return out;
  };
  n.rows = [itc, first = item_table_base(m)](const QueryInputs& q) {
    return item_rows(itc, first, q.item_ids);
  };
  n.run_dev = [self, itc](const QueryState& st, Stream* strm) {
    return dev_gather_items(self->dev_item_tables, itc, st.inputs->item_ids, rows_of(st), strm);
  };
  return m.add(std::move(n));
}

int behaviour_items(RecModel::Impl& m) {
  const std::vector<TableConfig> itc = m.cfg.item_tables;
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len, item_bytes = item_row_bytes(m.cfg);
  RecModel::Impl* self = &m;
  NodeDef n = node("seq", "emb_gather");
  n.cost = [di, L, item_bytes](int64_t q) {
    return io_node("seq", "emb_gather", 0, double(q * L * item_bytes), double(q * L * di * kF),
                   Shape{q, L, di});
  };
  n.run = [self, itc, di, L](const QueryState& st, int mt) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, L, di});
    gather_items(self->item_tables, itc, st.inputs->seq_ids, rows * L, out.data<float>(), di, mt);
    return out;
  };
  n.rows = [itc, first = item_table_base(m)](const QueryInputs& q) {
    return item_rows(itc, first, q.seq_ids);
  };
  n.run_dev = [self, itc, di, L](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    return dev_gather_items(self->dev_item_tables, itc, st.inputs->seq_ids, rows * L, strm)
        .reshape({rows, L, di});
  };
  return m.add(std::move(n));
}

int product(RecModel::Impl& m, const std::string& name, int a, int b, int64_t width) {
  NodeDef n = node(name, "elementwise", {a, b});
  n.cost = [name, width](int64_t q) {
    return io_node(name, "elementwise", double(q * width), double(2 * q * width * kF),
                   double(q * width * kF), Shape{q, width});
  };
  n.run = [a, b, width](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, width});
    const float* x = st.values[a].data<float>();
    const float* y = st.values[b].data<float>();
    float* o = out.data<float>();
    for (int64_t i = 0; i < rows * width; ++i) o[i] = x[i] * y[i];
    return out;
  };
  n.run_dev = [a, b, width](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    Tensor out = Tensor::empty({rows, width}, DType::kF32, st.values[a].device());
    ops::mul(st.values[a].reshape({rows, width}), st.values[b].reshape({rows, width}), out, strm);
    return out;
  };
  return m.add(std::move(n));
}

namespace {

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

}  // namespace

int item_sequence(RecModel::Impl& m, bool candidate_last) {
  const std::vector<TableConfig> itc = m.cfg.item_tables;
  const int64_t di = m.cfg.item_dim(), L = m.cfg.seq_len, T = candidate_last ? L + 1 : L;
  const int64_t item_bytes = item_row_bytes(m.cfg);
  RecModel::Impl* self = &m;
  NodeDef n = node("seq", "emb_gather");
  n.cost = [di, T, item_bytes](int64_t q) {
    return io_node("seq", "emb_gather", double(q * T * di), double(q * T * item_bytes),
                   double(q * T * di * kF), Shape{q, T, di});
  };
  n.run = [self, itc, di, L, T, candidate_last](const QueryState& st, int mt) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, T, di});
    float* o = out.data<float>();
    gather_items(self->item_tables, itc,
                 candidate_last ? positions(*st.inputs, itc.size(), L) : st.inputs->seq_ids,
                 rows * T, o, di, mt);
    const float* pos = self->w("pos_emb").data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < T * di; ++i) o[r * T * di + i] += pos[i];
    return out;
  };
  n.rows = [itc, L, candidate_last, first = item_table_base(m)](const QueryInputs& q) {
    return item_rows(itc, first, candidate_last ? positions(q, itc.size(), L) : q.seq_ids);
  };
  n.run_dev = [self, itc, di, L, T, candidate_last](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    Tensor out =
        dev_gather_items(self->dev_item_tables, itc,
                         candidate_last ? positions(*st.inputs, itc.size(), L) : st.inputs->seq_ids,
                         rows * T, strm)
            .reshape({rows, T, di});
    ops::add(out, self->dw("pos_emb").reshape({T, di}), out, strm);
    return out;
  };
  return m.add(std::move(n));
}

int self_attention(RecModel::Impl& m, int qkv, int64_t T) {
  const int64_t H = m.cfg.heads, dh = m.cfg.item_dim() / H;
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

int residual_linear(RecModel::Impl& m, const std::string& name, const std::string& wname,
                    int in_node, int res_node, int64_t in, int64_t out, int64_t T) {
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

int norm(RecModel::Impl& m, const std::string& name, int in_node, int64_t T) {
  const int64_t di = m.cfg.item_dim();
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

int transformer_block(RecModel::Impl& m, int x, int64_t T) {
  const int64_t di = m.cfg.item_dim();
  const int qkv = mlp(m, "attn.in_proj", x, di, {3 * di}, false, T);
  m.nodes[qkv].name = "qkv";  // the weights keep the names attn.in_proj.0.{weight,bias}
  const int att = self_attention(m, qkv, T);
  const int a_out = residual_linear(m, "attn_out", "attn.out_proj", att, x, di, di, T);
  const int h1 = norm(m, "ln1", a_out, T);
  const int f1 = mlp(m, "ffn", h1, di, {m.cfg.ffn_dim}, true, T);
  const int f2 = residual_linear(m, "ffn_out", "ffn.1", f1, h1, m.cfg.ffn_dim, di, T);
  return norm(m, "ln2", f2, T);
}

}  // namespace tandem::rec::parts
