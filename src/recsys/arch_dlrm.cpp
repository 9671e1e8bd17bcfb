// SPDX-License-Identifier: Apache-2.0
// DLRM (Naumov et al. 2019): x = bottom(dense), one pooled bag per table, a dot (pairwise dot
// products) or cat interaction, top MLP, sigmoid. Its config keys, weights and op nodes.
#include <cstring>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

using namespace parts;

int64_t bottom_width(const ModelConfig& c) {
  return c.bottom_mlp.empty() ? c.dense_features : c.bottom_mlp.back();
}

// "interaction" [rows, x + pairs]: x, then z_i . z_j for i > j over z = (x, e_1..e_T).
int dot_interaction(RecModel::Impl& m, int x, const std::vector<int>& bags, int64_t xw) {
  const int64_t nf = 1 + int64_t(bags.size()), d = xw;
  const int64_t pairs = nf * (nf - 1) / 2;
  const int64_t top_w = xw + pairs;
  NodeDef n = node("interaction", "interaction", {x});
  n.inputs.insert(n.inputs.end(), bags.begin(), bags.end());
  n.cost = [nf, d, pairs, top_w](int64_t q) {
    return io_node("interaction", "interaction", double(2 * q * pairs * d), double(q * nf * d * kF),
                   double(q * top_w * kF), Shape{q, top_w});
  };
  const std::vector<int> ins = n.inputs;
  n.run = [ins, nf, d, top_w](const QueryState& st, int) {
    const int64_t rows = rows_of(st);
    Tensor out = node_output({rows, top_w});
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
  // Device: Z = [x, e_1..e_T] as [rows, nf, d], G = Z Z^T (one batched GEMM), then row i of G's
  // strict lower triangle (G[:, i, 0:i]) for i = 1..nf-1 after x.
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
  return m.add(std::move(n));
}

int64_t dlrm_top_input_width(const ModelConfig& c) {
  if (c.interaction == Interaction::kDot) {
    const int64_t nf = 1 + static_cast<int64_t>(c.tables.size());
    return bottom_width(c) + nf * (nf - 1) / 2;
  }
  return bottom_width(c) + user_width(c);
}

void build_dlrm(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  const int dense = dense_input(m);
  const std::vector<int> bags = embedding_bags(m);
  const int x = mlp(m, "bottom", dense, c.dense_features, c.bottom_mlp, true, 1);
  int top_in;
  if (c.interaction == Interaction::kDot) {
    top_in = dot_interaction(m, x, bags, bottom_width(c));
  } else {
    std::vector<int> ins = {x};
    ins.insert(ins.end(), bags.begin(), bags.end());
    top_in = concat(m, "interaction", ins, dlrm_top_input_width(c));
    m.nodes[top_in].kind = "interaction";
  }
  sigmoid_out(m, {mlp(m, "top", top_in, dlrm_top_input_width(c), c.top_mlp, false, 1)});
}

void read_dlrm(const detail::JsonField& f, int64_t, ModelConfig& c) {
  if (f.has("interaction")) {
    const detail::JsonField in = f.at("interaction");
    const std::string s = in.string();
    if (s == "dot")
      c.interaction = Interaction::kDot;
    else if (s == "cat")
      c.interaction = Interaction::kCat;
    else
      in.fail(cat("unknown interaction '", s, "' (dot, cat)"));
  }
  if (c.tables.empty()) f.at("tables").fail("a DLRM needs at least one table");
  if (c.dense_features == 0 && !c.bottom_mlp.empty())
    f.at("bottom_mlp").fail("a bottom MLP needs dense_features > 0");
  if (c.interaction == Interaction::kDot) {
    if (c.dense_features == 0) f.fail("a dot interaction needs dense features");
    const int64_t x = bottom_width(c);
    for (const auto& t : c.tables)
      if (t.dim != x)
        f.at("tables").fail(cat("dot interaction: table ", t.name, " has width ", t.dim,
                                " but the bottom MLP ends at ", x));
  }
}

std::shared_ptr<const Architecture> dlrm() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kDlrm;
  a->title = "DLRM";
  a->keys = {"interaction"};
  a->read = read_dlrm;
  a->write = [](const ModelConfig& c, nlohmann::json& j) {
    j["interaction"] = to_string(c.interaction);
  };
  a->top_input_width = dlrm_top_input_width;
  a->weights = [](const ModelConfig&, std::vector<WeightSpec>&) {};
  a->build = build_dlrm;
  return a;
}

const Registration kDlrmRegistration(architectures(), "dlrm", dlrm());

}  // namespace
}  // namespace tandem::rec
