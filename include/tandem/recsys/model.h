// SPDX-License-Identifier: Apache-2.0
// Recommendation models (DLRM, Wide&Deep, DIN, BST, SASRec, DSSM) as op graphs whose nodes are
// the scheduler's units.
//
// A RecModel is built from a ModelConfig (config.h) with generated weights (weights.h) or weights
// loaded from a safetensors file. Its graph() is a tandem::Graph: one node per embedding bag, per
// MLP layer (GEMM + bias + activation), per interaction / attention / normalisation step, each
// carrying FLOPs and bytes for a query of q candidate rows and an attribute "cost_class" (MEM,
// COMP or TINY, the recsys spec §2.2: TINY when the time the core cost model (cost_model.h)
// predicts on the given device is below a threshold, else MEM when FLOP/byte is below the
// device's ridge point, else COMP). Executors run nodes one at a time with
// run_node(); forward() runs them all in topological order.
//
// Semantics (the numpy reference scripts/recsys/reference.py implements the same, independently):
//   linear(x) = x W^T + b (W [out, in] as nn.Linear); hidden layers ReLU; the last top layer has
//   no activation and the output is sigmoid(logit), one score per candidate row.
//   DLRM  x = bottom(dense); e_t = pool(table_t, bag); dot: [x, z_i . z_j for i > j over
//         z = (x, e_1..e_T)] (strict lower triangle, row-major in i); cat: [x, e_1..e_T];
//         logit = top(...).
//   WnD   deep = top([bottom(dense), e_1..e_T]); wide = dense . w_wide + sum_t wide_t[id] + b;
//         logit = deep + wide.
//   DIN   item(r) = concat over item tables; c = item(candidate), s_l = item(behaviour l);
//         a_l = att([s_l, c, s_l - c, s_l * c]) (hidden ReLU, output 1, no softmax);
//         u = sum_l a_l s_l; logit = top([dense, user bags, u, c]).
//   BST   X = [s_1..s_L, c] + pos (L+1 rows of width d); one post-LN transformer block:
//         H = LN1(X + MHA(X)), Y = LN2(H + W2 ReLU(W1 H)); logit = top([dense, user bags,
//         flatten(Y)]).
//   SASRec X = [s_1..s_L] + pos; the same block; u = Y[L] (the last position); logit = top(u * c)
//         (* elementwise; top_mlp [1] is a weighted inner product).
//   DSSM  u = user_tower([dense, user bags, mean_l s_l]), v = item_tower(c) (tower_mlp widths,
//         hidden ReLU, last linear); logit = top(u * v).
//
//   auto m = tandem::rec::RecModel::generate(tandem::rec::zoo_config("tiny-dlrm"));
//   tandem::rec::QueryInputs q = ...;               // workload.h makes these
//   std::vector<float> scores = m.forward(q);      // q.rows scores in (0, 1)
//   tandem::Graph g = m.graph(128, tandem::rec::measured_profile(tandem::Device::cpu()));
//
// Thread-safety: a RecModel is immutable after construction; run_node/forward may run concurrently
// on distinct QueryStates (and concurrently on distinct nodes of one state, as the graph allows).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/core/cost_model.h"
#include "tandem/core/graph.h"
#include "tandem/core/stream.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"
#include "tandem/recsys/config.h"
#include "tandem/recsys/embedding.h"

namespace tandem::rec {

// The inputs of one query: `rows` candidate rows, row-wise so that queries can be concatenated.
struct QueryInputs {
  int64_t rows = 0;
  std::vector<float> dense;  // rows * dense_features
  // Per pooled table: CSR bags, ids [offsets[r], offsets[r+1]) belong to row r. Raw ids for
  // hashed tables, rows otherwise.
  std::vector<std::vector<int64_t>> ids, offsets;
  // DIN/BST, per item table: candidate ids [rows] and behaviour ids [rows * seq_len].
  std::vector<std::vector<int64_t>> item_ids, seq_ids;
};

// The rows one lookup node reads from one table for a query (the GPU cache's keys).
struct TableRows {
  int table = 0;              // index into tables(), then item_tables() (tables().size() + k)
  std::vector<int64_t> rows;  // in lookup order, hashed ids resolved, repeats kept
};

// Concatenates queries row-wise (dynamic batching); all must belong to the same model.
TANDEM_API QueryInputs concat_queries(const std::vector<const QueryInputs*>& parts);
// Rows [begin, end) of a query, its inverse (DeepRecSched's split); InvalidArgument for a range
// outside [0, q.rows] or an empty one.
TANDEM_API QueryInputs slice_query(const QueryInputs& q, int64_t begin, int64_t end);

enum class CostClass { kMem, kComp, kTiny };
TANDEM_API const char* to_string(CostClass c);  // "MEM", "COMP", "TINY"
// True for the node kinds of a query's embedding phase (pooled lookups "emb_bag", item gathers
// "emb_gather", WnD's wide lookups "wide"): RACE's phase E (the recsys spec §2.6).
TANDEM_API bool is_lookup_kind(const std::string& kind);

// How classify() sorts nodes. The device is never a default here: callers pass the DeviceProfile
// the nodes run on (a ClusterSpec device, a `tandem profile` file read with
// DeviceProfile::from_json_file, or measured_profile() of executor.h for this machine).
struct CostClassOptions {
  // TINY below this predicted time, seconds: such an op costs about what enqueueing it does (a
  // few µs on a CPU stream), so a scheduler should not spend a stream on it. A scheduling
  // threshold, not a property of the device.
  double tiny_s = 5e-6;
  // Prices a node on the device; nullptr: RooflineCostModel with no launch overhead and efficiency
  // 1, t = max(flops / peak_flops, bytes / mem_bandwidth_bytes_per_s).
  const CostModel* model = nullptr;
};
// TINY when the predicted time on `device` is below opt.tiny_s, else MEM when the node's FLOP/byte
// is below the device's ridge point (peak_flops / mem_bandwidth_bytes_per_s), else COMP.
// InvalidArgument for a device without peak_flops or bandwidth.
TANDEM_API CostClass classify(const OpNode& node, const DeviceProfile& device,
                              const CostClassOptions& opt = {});

// Storage a scheduler hands a node for its output (a block of the executor's stream-ordered
// pool, the recsys spec §2.4): host memory of `bytes` bytes that the scheduler owns.
struct OutputBlock {
  void* data = nullptr;
  size_t bytes = 0;
};

// Per-query execution state: one output tensor per node, filled by run_node.
struct QueryState {
  const QueryInputs* inputs = nullptr;
  std::vector<Tensor> values;  // indexed by node id
  // Indexed by node id (or empty): where set, a CPU node writes its output into that block and
  // values[id] views it (it does not own it; the block is valid until the scheduler frees it).
  // Nodes whose output is a view of an input, and the device path, leave the block unused.
  std::vector<OutputBlock> outputs;
  // For a model on a device: the default stream of the model's device its nodes enqueue on
  // (nullptr: each op runs synchronously; run_node may name another). Values are device tensors.
  Stream* stream = nullptr;
  std::exception_ptr error;  // set by an executor when a node failed (later nodes are skipped)
};

class TANDEM_API RecModel {
 public:
  // Generated weights (seed = cfg.seed).
  static RecModel generate(const ModelConfig& cfg);
  // Generated weights with the pooled and item tables on disk: each table is streamed to
  // `dir`/<model>.<table>.<dtype>.temb (unless a file with the same rows, dim and dtype is there)
  // and mapped read-only, so tables larger than memory work (pages are read on demand).
  static RecModel generate_mapped(const ModelConfig& cfg, const std::string& dir);
  // Weights from a safetensors file written by save(); checks every tensor's presence, dtype and
  // shape against cfg (ParseError naming the file and tensor).
  static RecModel load(const ModelConfig& cfg, const std::string& path);
  void save(const std::string& path) const;

  RecModel(RecModel&&) noexcept;
  RecModel& operator=(RecModel&&) noexcept;
  ~RecModel();

  const ModelConfig& config() const;
  // The op graph for a query of q rows (node ids do not depend on q); attrs carry "cost_class",
  // classify(node, device, opt).
  Graph graph(int64_t q, const DeviceProfile& device, const CostClassOptions& opt = {}) const;
  int num_nodes() const;
  const std::string& node_name(int id) const;
  const std::vector<int>& topological_order() const;

  QueryState make_state(const QueryInputs& in) const;
  // Runs one node (its inputs must have run). `max_threads` caps its intra-op threads (0 = the
  // CPU default). The output goes to st.outputs[id] when that block is set and large enough. On a
  // device the node's work is enqueued on `stream` (a stream of the model's device; nullptr:
  // st.stream), and the output is complete once that stream reaches it.
  void run_node(int id, QueryState& st, int max_threads = 0, Stream* stream = nullptr) const;
  // The scores of the last node (rows values). Synchronizes st.stream first when it is set;
  // copies them from a device.
  std::vector<float> scores(const QueryState& st) const;
  // validate_query(config(), in).
  void validate(const QueryInputs& in) const;
  std::vector<float> forward(const QueryInputs& in) const;

  // Moves the model to `device` (cpu or cuda:N): dense weights and every embedding table are
  // copied there (tables as ops::embedding_bag tensors; int8 rows as u8 [rows, dim + 8]; a mapped
  // table is read whole). Afterwards run_node computes every node on the device through ops:
  // embedding bags and item gathers with ops::embedding_bag (the query's ids and offsets are
  // uploaded; hashed ids are hashed on the host first), MLP layers, concatenations, DLRM's dot
  // interaction (a batched GEMM), DIN's attention input and pooling, BST's attention and norms,
  // and the sigmoid (a softmax over [0, z]). Hot-row caches apply to CPU lookups only. Not
  // thread-safe: call it while no query runs. ops_path_on_cpu (with the CPU device): run that same
  // device code on the CPU backend's ops instead of the CPU nodes, which checks the device path on
  // a machine without a GPU.
  void to(Device device, bool ops_path_on_cpu = false);
  Device device() const;

  // Embedding tables (for statistics, benchmarks and caches).
  const std::vector<EmbeddingTable>& tables() const;
  const std::vector<EmbeddingTable>& item_tables() const;
  // Early touch of a query's rows in the mapped tables (EmbeddingTable::touch_rows): the pooled
  // tables' ids (hashed first where the table hashes) and the item tables' candidate and behaviour
  // ids; WnD's wide tables (one f32 per row) are left to the lookup. Returns the pages read (0 when
  // no table is mapped). Thread-safe, like lookups.
  int64_t touch(const QueryInputs& query) const;
  // The rows node `id` reads for query q, one entry per pooled or item table it reads; empty for
  // nodes that read none and for WnD's wide tables (one f32 per row). Ids must be valid
  // (validate()). Thread-safe.
  std::vector<TableRows> lookup_rows(int id, const QueryInputs& q) const;
  // A table by lookup_rows' numbering (pooled tables, then item tables).
  const EmbeddingTable& lookup_table(int table) const;
  // Attaches a hot-row cache of `rows_per_table` rows to every pooled table (0 removes them).
  // Not thread-safe: call it while no query runs.
  void set_cache_rows(int64_t rows_per_table);
  std::vector<CacheStats> cache_stats() const;
  int64_t weight_bytes() const;

  struct Impl;

 private:
  explicit RecModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Checks a query against a config (sizes, id ranges); InvalidArgument naming the model and table.
TANDEM_API void validate_query(const ModelConfig& cfg, const QueryInputs& in);

}  // namespace tandem::rec
