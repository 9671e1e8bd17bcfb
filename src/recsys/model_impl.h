// SPDX-License-Identifier: Apache-2.0
// RecModel internals shared by model.cpp (weights, files, validation), the architectures'
// builders (architecture.h: arch_*.cpp, node_parts.cpp) and the host and device helpers of the
// nodes (model_host.cpp, model_device.cpp).
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
  // The same on the model's device through tandem::ops (inputs and output on it, work enqueued on
  // the stream; nullptr: synchronous). Every node has one (model_device.cpp).
  std::function<Tensor(const QueryState&, Stream*)> run_dev;
  // Lookup nodes: the table rows the node reads for a query (RecModel::lookup_rows); else empty.
  std::function<std::vector<TableRows>(const QueryInputs&)> rows;
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
  // Device copies (RecModel::to): dense weights, and the tables as embedding_bag table tensors
  // (f32/f16 [rows, dim], u8 [rows, dim + 8] for row-wise int8). The host copies stay: nodes
  // without a device implementation run on them.
  Device device = Device::cpu();
  bool ops_path = false;  // run_node uses run_on_device (set for non-CPU devices)
  std::map<std::string, Tensor> dev_weights;
  std::vector<Tensor> dev_tables, dev_item_tables, dev_wide_tables;

  // The nodes' costs for q rows, without cost classes (RecModel::graph adds them for a device).
  Graph graph(int64_t q) const;
  const Tensor& w(const std::string& name) const;
  const Tensor& dw(const std::string& name) const;  // device weight
  void to_device(Device d, bool ops_on_cpu);        // model_device.cpp
  Tensor run_on_device(int id, QueryState& st, Stream* s) const;
  int add(NodeDef n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
};

// A node's output tensor [shape] f32: in the OutputBlock run_node was given for the node being
// run on this thread (taken by the first call, when large enough), else newly allocated. CPU
// nodes allocate their output with it, and only their output (model.cpp).
Tensor node_output(const Shape& shape);

// ---- CPU helpers of the nodes (model_host.cpp).
// Pooled lookups of `rows` bags of one table into out (row stride `stride`), chunks of bags over
// at most max_threads threads (0 = the CPU default).
void lookup_bags(const EmbeddingTable& t, bool hashed, uint64_t salt, const int64_t* ids,
                 const int64_t* offsets, int64_t rows, Pooling mode, float* out, int64_t stride,
                 HotRowCache* cache, int max_threads);
// out [n, sum of widths] = concat over item tables of row(ids_k[i]).
void gather_items(const std::vector<EmbeddingTable>& tabs, const std::vector<TableConfig>& cfgs,
                  const std::vector<std::vector<int64_t>>& ids, int64_t n, float* out,
                  int64_t stride, int max_threads);
// Concatenates per-row outputs (each flattened after dim 0) into [rows, sum of widths].
Tensor concat_rows(const std::vector<const Tensor*>& parts, int64_t rows);
// y [n, out] = x [n, in] W^T + b (+ residual) (ReLU when relu).
Tensor linear(const Tensor& x2d, const Tensor& w, const Tensor& b, bool relu,
              const Tensor* residual = nullptr);

// ---- device helpers (model_device.cpp); all work is enqueued on s (nullptr: synchronous).
// y [n, out] = x W^T + b (+ residual) (ReLU when relu), on x's device.
Tensor dev_linear(const Tensor& x2d, const Tensor& w, const Tensor& b, bool relu,
                  const Tensor* residual, Stream* s);
// [rows, sum of widths] from per-row parts (each flattened after dim 0), via a transposed
// buffer whose row blocks are the output's column blocks.
Tensor dev_concat(const std::vector<const Tensor*>& parts, int64_t rows, Stream* s);
// Pooled bags of ids[offsets[0] .. offsets[bags]) (host data; hashed with salt when hash) through
// ops::embedding_bag on the device table: [bags, dim].
Tensor dev_bags(const Tensor& table, bool hash, uint64_t salt, const int64_t* ids,
                const int64_t* offsets, int64_t bags, Pooling mode, Stream* s);
// concat over item tables of row(ids_k[i]) for i < n: [n, sum of dims] on the device.
Tensor dev_gather_items(const std::vector<Tensor>& tabs, const std::vector<TableConfig>& cfgs,
                        const std::vector<std::vector<int64_t>>& ids, int64_t n, Stream* s);
// t itself when contiguous, else a contiguous copy on its device (enqueued on s).
Tensor dev_contiguous(const Tensor& t, Stream* s);
// A host f32 vector of rows * width values as a device tensor [rows, width].
Tensor dev_upload(const float* values, const Shape& shape, Device d, Stream* s);

// Dense weights of a config (tables excluded), in a fixed order.
std::vector<WeightSpec> dense_weight_specs(const ModelConfig& cfg);
// Scale of the generated embedding tables of width dim.
inline float table_scale(int64_t dim) { return 1.0f / std::sqrt(static_cast<float>(dim)); }
inline constexpr float kWideTableScale = 0.1f;
// Hash salt of a table (raw ids -> rows).
uint64_t table_salt(const std::string& table_name);
// The rows a table of config c reads for ids (hashed with its salt when c.hash), in order.
std::vector<int64_t> rows_of_ids(const TableConfig& c, const std::vector<int64_t>& ids);

}  // namespace tandem::rec
