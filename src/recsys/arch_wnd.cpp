// SPDX-License-Identifier: Apache-2.0
// Wide&Deep (Cheng et al. 2016): deep = top([bottom(dense), e_1..e_T]); wide = dense . w_wide +
// sum_t wide_t[id] + b; score = sigmoid(deep + wide). Its config checks, weights and op nodes.
#include <cmath>

#include "recsys/architecture.h"
#include "recsys/node_parts.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

using namespace parts;

int64_t deep_width(const ModelConfig& c) {
  return (c.bottom_mlp.empty() ? c.dense_features : c.bottom_mlp.back()) + user_width(c);
}

// "wide" [rows, 1]: dense . w + sum over tables of wide_t[id] + b.
int wide_part(RecModel::Impl& m, int dense) {
  const ModelConfig& c = m.cfg;
  RecModel::Impl* self = &m;
  NodeDef n = node("wide", "wide", {dense});
  const int64_t df = c.dense_features;
  int64_t lookups_per_row = 0;
  for (const auto& t : c.tables) lookups_per_row += t.pooling;
  n.cost = [df, lookups_per_row](int64_t q) {
    return io_node("wide", "wide", double(2 * q * (df + lookups_per_row)),
                   double(q * (df + 2 * lookups_per_row) * kF), double(q * kF), Shape{q, 1});
  };
  const std::vector<TableConfig> tcs = c.tables;
  const Pooling mode = c.pooling_mode;
  n.run = [self, dense, tcs, mode](const QueryState& st, int max_threads) {
    const int64_t rows = rows_of(st);
    Tensor x = st.values[dense];
    Tensor out = linear(x, self->w("wide.dense.weight"), self->w("wide.dense.bias"), false);
    float* o = out.data<float>();
    std::vector<float> col(static_cast<size_t>(rows));
    for (size_t t = 0; t < tcs.size(); ++t) {
      lookup_bags(self->wide_tables[t], tcs[t].hash, table_salt(tcs[t].name),
                  st.inputs->ids[t].data(), st.inputs->offsets[t].data(), rows, mode, col.data(), 1,
                  nullptr, max_threads);
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
  return m.add(std::move(n));
}

void build_wnd(RecModel::Impl& m) {
  const ModelConfig& c = m.cfg;
  const int dense = dense_input(m);
  const std::vector<int> bags = embedding_bags(m);
  std::vector<int> ins = {mlp(m, "bottom", dense, c.dense_features, c.bottom_mlp, true, 1)};
  ins.insert(ins.end(), bags.begin(), bags.end());
  const int deep_in = concat(m, "deep_in", ins, deep_width(c));
  const int logit = mlp(m, "top", deep_in, deep_width(c), c.top_mlp, false, 1);
  sigmoid_out(m, {logit, wide_part(m, dense)});
}

std::shared_ptr<const Architecture> wnd() {
  auto a = std::make_shared<Architecture>();
  a->kind = ModelKind::kWnd;
  a->title = "Wide&Deep";
  a->wide_tables = true;
  a->read = [](const detail::JsonField& f, int64_t, ModelConfig& c) {
    if (c.tables.empty()) f.at("tables").fail("a Wide&Deep model needs at least one table");
    if (c.dense_features == 0) f.fail("a Wide&Deep model needs dense features");
  };
  a->write = [](const ModelConfig&, nlohmann::json&) {};
  a->top_input_width = deep_width;
  a->weights = [](const ModelConfig& c, std::vector<WeightSpec>& out) {
    const float s = 1.0f / std::sqrt(static_cast<float>(c.dense_features));
    out.push_back({"wide.dense.weight", Shape{1, c.dense_features}, s, 0.0f});
    out.push_back({"wide.dense.bias", Shape{1}, 0.1f, 0.0f});
  };
  a->build = build_wnd;
  return a;
}

const Registration kWndRegistration(architectures(), "wnd", wnd());

}  // namespace
}  // namespace tandem::rec
