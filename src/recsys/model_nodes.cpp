// SPDX-License-Identifier: Apache-2.0
// The op nodes of DLRM, Wide&Deep, DIN and BST: what each node computes (through tandem::ops and
// the embedding store) and what it costs for a query of q rows.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "recsys/model_impl.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

constexpr int64_t kF = 4;  // bytes per f32

int64_t rows_of(const QueryState& st) { return st.inputs->rows; }

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

}  // namespace

void RecModel::Impl::build_nodes() {
  const ModelConfig& c = cfg;
  nodes.clear();
  Impl* self = this;
  const int64_t elem_bytes = c.table_dtype == DType::kF32   ? 4
                             : c.table_dtype == DType::kF16 ? 2
                                                            : 1;

  auto concat = [&](const std::string& name, std::vector<int> ins, int64_t width) {
    NodeDef n;
    n.name = name;
    n.kind = "concat";
    n.inputs = ins;
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
    return add(std::move(n));
  };
  // A chain of linear layers "prefix.i" over `seq_rows` rows per query row (DIN attention: L).
  auto mlp = [&](const std::string& prefix, int input, int64_t in, const std::vector<int64_t>& ws,
                 bool relu_last, int64_t seq_rows) {
    int prev = input;
    for (size_t i = 0; i < ws.size(); ++i) {
      const std::string name = cat(prefix, '.', i);
      const int64_t out = ws[i];
      const bool relu = i + 1 < ws.size() || relu_last;
      NodeDef n;
      n.name = name;
      n.kind = "mlp";
      n.inputs = {prev};
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
      prev = add(std::move(n));
      in = out;
    }
    return prev;
  };
  // The dense input [rows, dense_features].
  auto dense_node = [&]() {
    const int64_t d = c.dense_features;
    NodeDef n;
    n.name = "dense";
    n.kind = "input";
    n.cost = [d](int64_t q) {
      return io_node("dense", "input", 0, 0, double(q * d * kF), Shape{q, d});
    };
    n.run = [d](const QueryState& st, int) {
      const int64_t rows = rows_of(st);
      Tensor t = Tensor::empty({rows, d}, DType::kF32);
      if (rows * d > 0)
        std::memcpy(t.raw_data(), st.inputs->dense.data(), sizeof(float) * rows * d);
      return t;
    };
    n.run_dev = [self, d](const QueryState& st, Stream* strm) {
      return dev_upload(st.inputs->dense.data(), {rows_of(st), d}, self->device, strm);
    };
    return add(std::move(n));
  };
  // Pooled embedding bags of every table.
  auto bag_nodes = [&]() {
    std::vector<int> ids;
    for (size_t t = 0; t < c.tables.size(); ++t) {
      const TableConfig tc = c.tables[t];
      NodeDef n;
      n.name = tc.name;
      n.kind = "emb_bag";
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
      const Pooling mode = c.pooling_mode;
      n.run = [self, t, tc, mode](const QueryState& st, int max_threads) {
        const int64_t rows = rows_of(st);
        Tensor out = Tensor::empty({rows, tc.dim}, DType::kF32);
        lookup_bags(self->tables[t], tc.hash, table_salt(tc.name), st.inputs->ids[t].data(),
                    st.inputs->offsets[t].data(), rows, mode, out.data<float>(), tc.dim,
                    self->caches.empty() ? nullptr : self->caches[t].get(), max_threads);
        return out;
      };
      n.run_dev = [self, t, tc, mode](const QueryState& st, Stream* strm) {
        return dev_bags(self->dev_tables[t], tc.hash, table_salt(tc.name), st.inputs->ids[t].data(),
                        st.inputs->offsets[t].data(), rows_of(st), mode, strm);
      };
      ids.push_back(add(std::move(n)));
    }
    return ids;
  };
  auto sigmoid_node = [&](std::vector<int> ins) {
    NodeDef n;
    n.name = "out";
    n.kind = "sigmoid";
    n.inputs = ins;
    n.cost = [](int64_t q) {
      return io_node("out", "sigmoid", double(4 * q), double(8 * q), double(4 * q), Shape{q, 1});
    };
    n.run = [ins](const QueryState& st, int) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::empty({rows, 1}, DType::kF32);
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
    return add(std::move(n));
  };
  int64_t user_width = 0;
  for (const auto& t : c.tables) user_width += t.dim;

  if (c.kind == ModelKind::kDlrm || c.kind == ModelKind::kWnd) {
    const int dense = dense_node();
    const std::vector<int> bags = bag_nodes();
    const int x = mlp("bottom", dense, c.dense_features, c.bottom_mlp, true, 1);
    const int64_t xw = c.bottom_mlp.empty() ? c.dense_features : c.bottom_mlp.back();
    int top_in;
    int64_t top_w;
    if (c.kind == ModelKind::kDlrm && c.interaction == Interaction::kDot) {
      const int64_t nf = 1 + int64_t(bags.size()), d = xw;
      const int64_t pairs = nf * (nf - 1) / 2;
      top_w = xw + pairs;
      NodeDef n;
      n.name = "interaction";
      n.kind = "interaction";
      n.inputs = {x};
      n.inputs.insert(n.inputs.end(), bags.begin(), bags.end());
      n.cost = [nf, d, pairs, top_w](int64_t q) {
        return io_node("interaction", "interaction", double(2 * q * pairs * d),
                       double(q * nf * d * kF), double(q * top_w * kF), Shape{q, top_w});
      };
      const std::vector<int> ins = n.inputs;
      n.run = [ins, nf, d, top_w](const QueryState& st, int) {
        const int64_t rows = rows_of(st);
        Tensor out = Tensor::empty({rows, top_w}, DType::kF32);
        float* o = out.data<float>();
        std::vector<const float*> z(ins.size());
        for (size_t i = 0; i < ins.size(); ++i) z[i] = st.values[ins[i]].data<float>();
        for (int64_t r = 0; r < rows; ++r) {
          float* orow = o + r * top_w;
          std::memcpy(orow, z[0] + r * d, sizeof(float) * d);
          int64_t k = d;
          for (int64_t i = 1; i < nf; ++i)
            for (int64_t j = 0; j < i; ++j) {
              const float* a = z[i] + r * d;
              const float* b = z[j] + r * d;
              float s = 0;
              for (int64_t e = 0; e < d; ++e) s += a[e] * b[e];
              orow[k++] = s;
            }
        }
        return out;
      };
      // Device: Z = [x, e_1..e_T] as [rows, nf, d], G = Z Z^T (one batched GEMM), then row i of
      // G's strict lower triangle (G[:, i, 0:i]) for i = 1..nf-1 after x.
      n.run_dev = [ins, nf, d](const QueryState& st, Stream* strm) {
        const int64_t rows = rows_of(st);
        std::vector<const Tensor*> zs;
        for (int i : ins) zs.push_back(&st.values[i]);
        const Tensor z = dev_concat(zs, rows, strm).reshape({rows, nf, d});
        Tensor g = Tensor::empty({rows, nf, nf}, DType::kF32, z.device());
        ops::batched_gemm(z, z, g, {.trans_b = true}, strm);
        std::vector<Tensor> tri;
        for (int64_t i = 1; i < nf; ++i)
          tri.push_back(dev_contiguous(g.select(1, i).slice(1, 0, i), strm));
        std::vector<const Tensor*> parts = {zs.front()};
        for (const Tensor& t : tri) parts.push_back(&t);
        return dev_concat(parts, rows, strm);
      };
      top_in = add(std::move(n));
    } else {
      std::vector<int> ins = {x};
      ins.insert(ins.end(), bags.begin(), bags.end());
      top_w = xw + user_width;
      top_in = concat(c.kind == ModelKind::kDlrm ? "interaction" : "deep_in", ins, top_w);
      if (c.kind == ModelKind::kDlrm) nodes[top_in].kind = "interaction";
    }
    const int logit = mlp("top", top_in, top_w, c.top_mlp, false, 1);
    if (c.kind == ModelKind::kDlrm) {
      sigmoid_node({logit});
    } else {
      // Wide part: dense . w + sum over tables of wide_t[id] + b.
      NodeDef n;
      n.name = "wide";
      n.kind = "wide";
      n.inputs = {dense};
      const int64_t df = c.dense_features;
      int64_t lookups_per_row = 0;
      for (const auto& t : c.tables) lookups_per_row += t.pooling;
      n.cost = [df, lookups_per_row](int64_t q) {
        return io_node("wide", "wide", double(2 * q * (df + lookups_per_row)),
                       double(q * (df + 2 * lookups_per_row) * kF), double(q * kF), Shape{q, 1});
      };
      const std::vector<TableConfig> tcs = c.tables;
      const Pooling mode = c.pooling_mode;
      n.run = [self, dense, df, tcs, mode](const QueryState& st, int max_threads) {
        const int64_t rows = rows_of(st);
        Tensor x = st.values[dense];
        Tensor out = linear(x, self->w("wide.dense.weight"), self->w("wide.dense.bias"), false);
        float* o = out.data<float>();
        std::vector<float> col(static_cast<size_t>(rows));
        for (size_t t = 0; t < tcs.size(); ++t) {
          lookup_bags(self->wide_tables[t], tcs[t].hash, table_salt(tcs[t].name),
                      st.inputs->ids[t].data(), st.inputs->offsets[t].data(), rows, mode,
                      col.data(), 1, nullptr, max_threads);
          for (int64_t r = 0; r < rows; ++r) o[r] += col[r];
        }
        return out;
      };
      n.run_dev = [self, dense, tcs, mode](const QueryState& st, Stream* strm) {
        const int64_t rows = rows_of(st);
        Tensor out = dev_linear(st.values[dense], self->dw("wide.dense.weight"),
                                self->dw("wide.dense.bias"), false, nullptr, strm);
        for (size_t t = 0; t < tcs.size(); ++t) {
          const Tensor col =
              dev_bags(self->dev_wide_tables[t], tcs[t].hash, table_salt(tcs[t].name),
                       st.inputs->ids[t].data(), st.inputs->offsets[t].data(), rows, mode, strm);
          ops::add(out, col, out, strm);
        }
        return out;
      };
      const int wide = add(std::move(n));
      sigmoid_node({logit, wide});
    }
    return;
  }

  // ---- DIN and BST ----
  const int64_t di = c.item_dim(), L = c.seq_len;
  std::vector<int> front;
  if (c.dense_features > 0) front.push_back(dense_node());
  const std::vector<int> bags = bag_nodes();
  front.insert(front.end(), bags.begin(), bags.end());
  const int64_t front_w = c.dense_features + user_width;
  const std::vector<TableConfig> itc = c.item_tables;
  const int64_t item_bytes = [&] {
    int64_t b = 0;
    for (const auto& t : itc) b += t.dim * elem_bytes + 8;
    return b;
  }();

  if (c.kind == ModelKind::kDin) {
    NodeDef cand;
    cand.name = "cand";
    cand.kind = "emb_gather";
    cand.cost = [di, item_bytes](int64_t q) {
      return io_node("cand", "emb_gather", 0, double(q * item_bytes), double(q * di * kF),
                     Shape{q, di});
    };
    cand.run = [self, itc, di](const QueryState& st, int mt) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::empty({rows, di}, DType::kF32);
      gather_items(self->item_tables, itc, st.inputs->item_ids, rows, out.data<float>(), di, mt);
      return out;
    };
    cand.run_dev = [self, itc](const QueryState& st, Stream* strm) {
      return dev_gather_items(self->dev_item_tables, itc, st.inputs->item_ids, rows_of(st), strm);
    };
    const int cnode = add(std::move(cand));
    NodeDef sq;
    sq.name = "seq";
    sq.kind = "emb_gather";
    sq.cost = [di, L, item_bytes](int64_t q) {
      return io_node("seq", "emb_gather", 0, double(q * L * item_bytes), double(q * L * di * kF),
                     Shape{q, L, di});
    };
    sq.run = [self, itc, di, L](const QueryState& st, int mt) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::empty({rows, L, di}, DType::kF32);
      gather_items(self->item_tables, itc, st.inputs->seq_ids, rows * L, out.data<float>(), di, mt);
      return out;
    };
    sq.run_dev = [self, itc, di, L](const QueryState& st, Stream* strm) {
      const int64_t rows = rows_of(st);
      return dev_gather_items(self->dev_item_tables, itc, st.inputs->seq_ids, rows * L, strm)
          .reshape({rows, L, di});
    };
    const int snode = add(std::move(sq));
    NodeDef ai;
    ai.name = "att_in";
    ai.kind = "elementwise";
    ai.inputs = {snode, cnode};
    ai.cost = [di, L](int64_t q) {
      return io_node("att_in", "elementwise", double(2 * q * L * di), double((q * L + q) * di * kF),
                     double(4 * q * L * di * kF), Shape{q * L, 4 * di});
    };
    ai.run = [snode, cnode, di, L](const QueryState& st, int) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::empty({rows * L, 4 * di}, DType::kF32);
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
    // Device: c repeated over the L behaviours by a batched GEMM with a column of ones (exact:
    // one product 1 * c per element), then s - c and s * c elementwise, then the concatenation.
    ai.run_dev = [snode, cnode, di, L](const QueryState& st, Stream* strm) {
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
    const int ain = add(std::move(ai));
    std::vector<int64_t> aw = c.attention_mlp;
    aw.push_back(1);
    const int score = mlp("att", ain, 4 * di, aw, false, L);
    NodeDef pool;
    pool.name = "att_pool";
    pool.kind = "weighted_sum";
    pool.inputs = {score, snode};
    pool.cost = [di, L](int64_t q) {
      return io_node("att_pool", "weighted_sum", double(2 * q * L * di),
                     double(q * L * (di + 1) * kF), double(q * di * kF), Shape{q, di});
    };
    pool.run = [score, snode, di, L](const QueryState& st, int) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::zeros({rows, di}, DType::kF32);
      const float* a = st.values[score].data<float>();
      const float* s = st.values[snode].data<float>();
      float* o = out.data<float>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t e = 0; e < di; ++e) o[r * di + e] += a[r * L + l] * s[(r * L + l) * di + e];
      return out;
    };
    // u[r] = a[r] (as [1, L]) @ s[r] ([L, di]): one batched GEMM over the rows.
    pool.run_dev = [score, snode, di, L](const QueryState& st, Stream* strm) {
      const int64_t rows = rows_of(st);
      Tensor out = Tensor::empty({rows, 1, di}, DType::kF32, st.values[snode].device());
      if (rows > 0)
        ops::batched_gemm(st.values[score].reshape({rows, 1, L}),
                          st.values[snode].reshape({rows, L, di}), out, {}, strm);
      return out.reshape({rows, di});
    };
    const int u = add(std::move(pool));
    std::vector<int> ins = front;
    ins.push_back(u);
    ins.push_back(cnode);
    const int top_in = concat("top_in", ins, front_w + 2 * di);
    sigmoid_node({mlp("top", top_in, front_w + 2 * di, c.top_mlp, false, 1)});
    return;
  }

  // BST
  const int64_t T = L + 1, H = c.heads, dh = di / H, F = c.ffn_dim;
  NodeDef sq;
  sq.name = "seq";
  sq.kind = "emb_gather";
  sq.cost = [di, T, item_bytes](int64_t q) {
    return io_node("seq", "emb_gather", double(q * T * di), double(q * T * item_bytes),
                   double(q * T * di * kF), Shape{q, T, di});
  };
  sq.run = [self, itc, di, L, T](const QueryState& st, int mt) {
    const int64_t rows = rows_of(st);
    Tensor out = Tensor::empty({rows, T, di}, DType::kF32);
    float* o = out.data<float>();
    // Behaviours at positions 0..L-1 of each row, the candidate at position L.
    std::vector<std::vector<int64_t>> ids(itc.size());
    for (size_t k = 0; k < itc.size(); ++k) {
      ids[k].resize(static_cast<size_t>(rows * T));
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(st.inputs->seq_ids[k].begin() + r * L, L, ids[k].begin() + r * T);
        ids[k][r * T + L] = st.inputs->item_ids[k][r];
      }
    }
    gather_items(self->item_tables, itc, ids, rows * T, o, di, mt);
    const float* pos = self->w("pos_emb").data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < T * di; ++i) o[r * T * di + i] += pos[i];
    return out;
  };
  sq.run_dev = [self, itc, di, L, T](const QueryState& st, Stream* strm) {
    const int64_t rows = rows_of(st);
    std::vector<std::vector<int64_t>> ids(itc.size());
    for (size_t k = 0; k < itc.size(); ++k) {
      ids[k].resize(static_cast<size_t>(rows * T));
      for (int64_t r = 0; r < rows; ++r) {
        std::copy_n(st.inputs->seq_ids[k].begin() + r * L, L, ids[k].begin() + r * T);
        ids[k][r * T + L] = st.inputs->item_ids[k][r];
      }
    }
    Tensor out =
        dev_gather_items(self->dev_item_tables, itc, ids, rows * T, strm).reshape({rows, T, di});
    ops::add(out, self->dw("pos_emb").reshape({T, di}), out, strm);
    return out;
  };
  const int x = add(std::move(sq));
  const int qkv = mlp("attn.in_proj", x, di, {3 * di}, false, T);
  nodes[qkv].name = "qkv";
  // The weights keep the names attn.in_proj.0.{weight,bias}.
  NodeDef mha;
  mha.name = "mha";
  mha.kind = "attention";
  mha.inputs = {qkv};
  mha.cost = [T, H, dh](int64_t q) {
    AttentionDims d;
    d.tq = T;
    d.tk = T;
    d.hq = H;
    d.hkv = H;
    d.head_dim = dh;
    d.causal = false;
    OpNode g = make_attention_node("mha", d);
    g.flops *= double(q);
    g.bytes_read *= double(q);
    g.bytes_written *= double(q);
    g.output_shapes = {Shape{q * T, H * dh}};
    return g;
  };
  mha.run = [qkv, T, H, dh](const QueryState& st, int) {
    const int64_t rows = rows_of(st), d = H * dh;
    const float* src = st.values[qkv].data<float>();
    Tensor out = Tensor::empty({rows * T, d}, DType::kF32);
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
  mha.run_dev = [qkv, T, H, dh](const QueryState& st, Stream* strm) {
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
  const int att = add(std::move(mha));
  auto residual_linear = [&](const std::string& name, const std::string& wname, int in_node,
                             int res_node, int64_t in, int64_t out) {
    NodeDef n;
    n.name = name;
    n.kind = "mlp";
    n.inputs = {in_node, res_node};
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
    return add(std::move(n));
  };
  auto norm = [&](const std::string& name, int in_node) {
    NodeDef n;
    n.name = name;
    n.kind = "layer_norm";
    n.inputs = {in_node};
    n.cost = [name, T, di](int64_t q) {
      OpNode g = make_norm_node(name, "layer_norm", Shape{q * T, di});
      return g;
    };
    n.run = [self, name, in_node, di](const QueryState& st, int) {
      const Tensor& xin = st.values[in_node];
      Tensor y = Tensor::empty({xin.numel() / di, di}, DType::kF32);
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
    return add(std::move(n));
  };
  const int a_out = residual_linear("attn_out", "attn.out_proj", att, x, di, di);
  const int h1 = norm("ln1", a_out);
  const int f1 = mlp("ffn", h1, di, {F}, true, T);
  const int f2 = residual_linear("ffn_out", "ffn.1", f1, h1, F, di);
  const int y = norm("ln2", f2);
  std::vector<int> ins = front;
  ins.push_back(y);
  const int top_in = concat("top_in", ins, front_w + T * di);
  sigmoid_node({mlp("top", top_in, front_w + T * di, c.top_mlp, false, 1)});
}

}  // namespace tandem::rec
