// SPDX-License-Identifier: Apache-2.0
// The op nodes several architectures share: dense input, embedding bags, MLP layers, concatenation
// and the sigmoid output (node_parts.h).
#include "recsys/node_parts.h"

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

}  // namespace tandem::rec::parts
