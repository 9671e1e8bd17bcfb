// SPDX-License-Identifier: Apache-2.0
// RecStream (the recsys spec §2.5): a graph neural network that predicts, from a model's op graph
// and the load it serves, the p99 latency of every stream configuration, so that a server can pick
// the configuration without measuring them all.
//
// Configuration space: K streams in {1, 2, 4, 8, 16} x scheduler in {query-level B2 (the
// "stream-pool" policy), op-level RecOS (the "recos" policy)}, ten configurations, each mapped onto
// PolicyOptions (policy, streams). The spec's third knob, merging the copy streams into the compute
// stream, is dropped: no executor of this tree has separate copy streams (SimExecutor elides
// copies, the CPU executor has none, DeviceExecutor uploads a query's inputs on the stream that
// runs it), so both settings would run the same schedule.
//
// Inputs:
//   X [n, 17]  per node v of RecModel::graph(q̄): one-hot of its kind bucket (10, node_bucket()),
//              ln(1 + FLOPs), ln(1 + bytes moved), ln(1 + c(v) in µs) and the share of the device
//              it occupies (Executor::predict_nodes), one-hot of its cost class (MEM, COMP, TINY).
//   Â [n, n]   D^-1/2 (A + I) D^-1/2 over the symmetrised data dependencies.
//   z [6]      the load: log2 clients, ln(1 + open-loop arrivals per second), ln mean query rows,
//              ln p95 query rows, ln(1 + mean pooling factor), ln(1 + behaviour sequence length).
//              (The spec lists the raw quantities; their logs keep the MLP's inputs O(1).)
// Model ("hybrid"): H1 = ReLU(Â X W1 + b1), H2 = ReLU(Â H1 W2 + b2), g = [mean_v H2 | max_v H2],
//   u = ReLU(z Wz + bz), h = ReLU([g | u] Wh + bh), y = h Wo + bo: y[c] is the predicted ln p99
//   (ms) of configuration c; the argmin is the choice.
//
// Weights come from a JSON file written by the offline trainer (bench/recsys/recstream_train.py),
// one per (executor, device class):
//   {"format": "tandem-recstream", "version": 1, "executor": "sim", "device_class": "h100",
//    "configs": ["stream-pool:1", ..., "recos:16"], "node_features": 17, "load_features": 6,
//    "W1": [[17 x h]], "b1": [h], "W2": [[h x h]], "b2": [h], "Wz": [[6 x hz]], "bz": [hz],
//    "Wh": [[2h + hz x hh]], "bh": [hh], "Wo": [[hh x |C|]], "bo": [|C|], "command": "...", ...}
// load_recstream_weights checks the format, version, every shape and the configuration list and
// throws ParseError naming the file and the field.
//
//   auto w = tandem::rec::load_recstream_weights("configs/recsys/recstream/sim-h100.json");
//   auto in = tandem::rec::recstream_inputs(model, ex, {.clients = 32, .mean_rows = 128, ...});
//   auto p = tandem::rec::recstream_predict(w, in);       // p.best: index into w.configs
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/executor.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

// One stream configuration.
struct TANDEM_API StreamConfig {
  std::string scheduler;     // "stream-pool" (query-level, B2) or "recos" (op-level)
  int streams = 1;           // K
  std::string name() const;  // "stream-pool:4"
  // `base` with this configuration's policy and streams.
  PolicyOptions apply(PolicyOptions base) const;
};
// "recos:8" -> {recos, 8}; InvalidArgument for another scheduler or K outside 1..1024.
TANDEM_API StreamConfig parse_stream_config(const std::string& name);
// The ten configurations, query-level first, K ascending.
TANDEM_API std::vector<StreamConfig> stream_config_space();

inline constexpr int kNodeFeatures = 17;
inline constexpr int kNodeBuckets = 10;
inline constexpr int kLoadFeatures = 6;
// The kind bucket of a graph node kind: 0 input ("dense", "input"), 1 "emb_bag", 2 item gathers
// ("emb_gather", "seq", "cand"), 3 "wide", 4 "mlp", 5 "interaction", 6 "concat", 7 attention
// ("att_in", "att_pool", "attention", "mha", "weighted_sum"), 8 normalisation and elementwise
// ("layer_norm", "elementwise"), 9 anything else (the output, "sigmoid", "out").
TANDEM_API int node_bucket(const std::string& kind);

// The load a configuration is chosen for.
struct LoadShape {
  double clients = 1;    // closed-loop clients (or in-flight queries)
  double rate_qps = 0;   // open-loop arrivals per second (0: closed loop)
  double mean_rows = 0;  // mean query rows (0: the model's query_size)
  double p95_rows = 0;   // 95th percentile of query rows (0: mean_rows)
};

// Sets load.mean_rows and load.p95_rows (the ceil(0.95 n)-th smallest) from the rows of n queries;
// leaves them unchanged for none.
TANDEM_API void set_row_stats(LoadShape& load, std::vector<double> rows);

// A dense row-major matrix.
struct Matrix {
  int64_t rows = 0, cols = 0;
  std::vector<double> v;
  double& at(int64_t r, int64_t c) { return v[size_t(r * cols + c)]; }
  double at(int64_t r, int64_t c) const { return v[size_t(r * cols + c)]; }
};

struct TANDEM_API RecStreamInputs {
  Matrix x;                        // [n, kNodeFeatures]
  Matrix adj;                      // Â [n, n]
  std::vector<double> z;           // [kLoadFeatures]
  nlohmann::json to_json() const;  // {"x": [[...]], "adj": [[...]], "z": [...]}
};

// X and Â of `model`'s graph for queries of load.mean_rows rows, priced by executor.predict_nodes
// (so SimExecutor's cost model on a simulated device), and z of the load.
TANDEM_API RecStreamInputs recstream_inputs(const RecModel& model, const Executor& executor,
                                            const LoadShape& load);
// z alone (recstream_inputs' third part).
TANDEM_API std::vector<double> load_features(const ModelConfig& cfg, const LoadShape& load);

struct RecStreamWeights {
  std::string executor, device_class;
  std::vector<StreamConfig> configs;
  Matrix w1, w2, wz, wh, wo;
  std::vector<double> b1, b2, bz, bh, bo;
  nlohmann::json meta;  // everything else in the file (command, training summary)
};
// Reads and checks a weight file (ParseError naming the file and the field).
TANDEM_API RecStreamWeights load_recstream_weights(const std::string& path);
TANDEM_API RecStreamWeights parse_recstream_weights(const nlohmann::json& j,
                                                    const std::string& source);

struct TANDEM_API RecStreamPrediction {
  std::vector<double> log_p99_ms;  // per configuration of the weights
  int best = 0;                    // argmin
  double p99_ms(int c) const;      // exp(log_p99_ms[c])
};
// The forward pass; InvalidArgument when the inputs' widths do not match the weights.
TANDEM_API RecStreamPrediction recstream_predict(const RecStreamWeights& w,
                                                 const RecStreamInputs& in);

}  // namespace tandem::rec
