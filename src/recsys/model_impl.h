// SPDX-License-Identifier: Apache-2.0
// RecModel internals shared by model.cpp (weights, files, validation) and model_nodes.cpp (the op
// nodes of each model kind).
#pragma once

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/recsys/model.h"

namespace tandem::rec {

// A weight the generator fills: name, shape, scale and offset of the uniform rule (weights.h).
struct WeightSpec {
  std::string name;
  Shape shape;
  float scale = 1.0f;
  float offset = 0.0f;
};

struct NodeDef {
  std::string name;
  std::string kind;
  std::vector<int> inputs;
  std::function<OpNode(int64_t q)> cost;  // graph node for q rows (costs only)
  std::function<Tensor(const QueryState&, int max_threads)> run;  // returns values[id]
};

struct RecModel::Impl {
  ModelConfig cfg;
  std::map<std::string, Tensor> weights;             // dense weights, f32
  std::vector<EmbeddingTable> tables;                // pooled tables
  std::vector<EmbeddingTable> item_tables;           // DIN/BST
  std::vector<EmbeddingTable> wide_tables;           // WnD wide part (f32, dim 1)
  std::vector<std::unique_ptr<HotRowCache>> caches;  // per pooled table, or empty
  std::vector<NodeDef> nodes;
  std::vector<int> order;

  const Tensor& w(const std::string& name) const;
  int add(NodeDef n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  void build_nodes();  // model_nodes.cpp
};

// Dense weights of a config (tables excluded), in a fixed order.
std::vector<WeightSpec> dense_weight_specs(const ModelConfig& cfg);
// Scale of the generated embedding tables of width dim.
inline float table_scale(int64_t dim) { return 1.0f / std::sqrt(static_cast<float>(dim)); }
inline constexpr float kWideTableScale = 0.1f;
// Hash salt of a table (raw ids -> rows).
uint64_t table_salt(const std::string& table_name);

}  // namespace tandem::rec
