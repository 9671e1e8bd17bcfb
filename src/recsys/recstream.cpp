// SPDX-License-Identifier: Apache-2.0
// RecStream's configuration space, inputs, weight reader and forward pass (recstream.h).
#include "tandem/recsys/recstream.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "core/json_reader.h"
#include "tandem/core/error.h"

namespace tandem::rec {
namespace {

constexpr const char* kWeightsFormat = "tandem-recstream";
constexpr int64_t kWeightsVersion = 1;
constexpr int64_t kMaxHidden = 4096;

// A matrix of `rows` x `cols` numbers (cols = -1: any width, the same for every row).
Matrix read_weight_matrix(const detail::JsonField& f, int64_t rows, int64_t cols) {
  const size_t n = f.array_size();
  if (rows >= 0 && int64_t(n) != rows) f.fail(cat("expected ", rows, " rows, got ", n));
  Matrix m;
  m.rows = int64_t(n);
  m.cols = cols;
  for (size_t r = 0; r < n; ++r) {
    const detail::JsonField row = f[r];
    const size_t c = row.array_size();
    if (m.cols < 0) m.cols = int64_t(c);
    if (int64_t(c) != m.cols) row.fail(cat("expected ", m.cols, " columns, got ", c));
    for (size_t k = 0; k < c; ++k) m.v.push_back(row[k].number());
  }
  if (m.rows == 0 || m.cols <= 0 || m.cols > kMaxHidden)
    f.fail(cat("expected a non-empty matrix with at most ", kMaxHidden, " columns"));
  return m;
}

std::vector<double> read_weight_vector(const detail::JsonField& f, int64_t size) {
  const size_t n = f.array_size();
  if (int64_t(n) != size) f.fail(cat("expected ", size, " values, got ", n));
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) v.push_back(f[i].number());
  return v;
}

// out[r] = act(sum_k in[r][k] w[k] + b) for a [n, in] x [in, out] product.
Matrix gcn_affine(const Matrix& in, const Matrix& w, const std::vector<double>& b, bool relu) {
  Matrix out{in.rows, w.cols, std::vector<double>(size_t(in.rows * w.cols))};
  for (int64_t r = 0; r < in.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) {
      double s = b[size_t(c)];
      for (int64_t k = 0; k < in.cols; ++k) s += in.at(r, k) * w.at(k, c);
      out.at(r, c) = relu ? std::max(0.0, s) : s;
    }
  return out;
}

Matrix gcn_matmul(const Matrix& a, const Matrix& b) {
  return gcn_affine(a, b, std::vector<double>(size_t(b.cols), 0.0), false);
}

nlohmann::json matrix_rows_json(const Matrix& m) {
  nlohmann::json j = nlohmann::json::array();
  for (int64_t r = 0; r < m.rows; ++r)
    j.push_back(std::vector<double>(m.v.begin() + r * m.cols, m.v.begin() + (r + 1) * m.cols));
  return j;
}

}  // namespace

std::string StreamConfig::name() const { return cat(scheduler, ':', streams); }

PolicyOptions StreamConfig::apply(PolicyOptions base) const {
  base.policy = scheduler;
  base.streams = streams;
  return base;
}

StreamConfig parse_stream_config(const std::string& name) {
  const size_t colon = name.find(':');
  StreamConfig c;
  c.scheduler = name.substr(0, colon);
  if (colon == std::string::npos || (c.scheduler != "stream-pool" && c.scheduler != "recos"))
    throw InvalidArgument(
        cat("stream configuration '", name, "': expected stream-pool:K or recos:K"));
  const std::string k = name.substr(colon + 1);
  char* end = nullptr;
  const long v = std::strtol(k.c_str(), &end, 10);
  if (k.empty() || *end != '\0' || v < 1 || v > 1024)
    throw InvalidArgument(cat("stream configuration '", name, "': K must be in 1..1024"));
  c.streams = int(v);
  return c;
}

std::vector<StreamConfig> stream_config_space() {
  std::vector<StreamConfig> out;
  for (const char* s : {"stream-pool", "recos"})
    for (int k : {1, 2, 4, 8, 16}) out.push_back({s, k});
  return out;
}

int node_bucket(const std::string& kind) {
  if (kind == "dense" || kind == "input") return 0;
  if (kind == "emb_bag") return 1;
  if (kind == "emb_gather" || kind == "seq" || kind == "cand") return 2;
  if (kind == "wide") return 3;
  if (kind == "mlp") return 4;
  if (kind == "interaction") return 5;
  if (kind == "concat") return 6;
  if (kind == "att_in" || kind == "att_pool" || kind == "attention" || kind == "mha" ||
      kind == "weighted_sum")
    return 7;
  if (kind == "layer_norm" || kind == "elementwise") return 8;
  return 9;
}

nlohmann::json RecStreamInputs::to_json() const {
  return {{"x", matrix_rows_json(x)}, {"adj", matrix_rows_json(adj)}, {"z", z}};
}

std::vector<double> load_features(const ModelConfig& cfg, const LoadShape& load) {
  if (!(load.clients >= 1) || !(load.rate_qps >= 0) || !(load.mean_rows >= 0) ||
      !(load.p95_rows >= 0))
    throw InvalidArgument(cat("RecStream load: clients ", load.clients,
                              " < 1, or a negative rate (", load.rate_qps, ") or query size"));
  const double mean = load.mean_rows > 0 ? load.mean_rows : double(cfg.query_size);
  const double p95 = load.p95_rows > 0 ? load.p95_rows : mean;
  double pooling = 0;
  for (const auto& t : cfg.tables) pooling += double(t.pooling);
  if (!cfg.tables.empty()) pooling /= double(cfg.tables.size());
  return {std::log2(load.clients), std::log1p(load.rate_qps), std::log(mean),
          std::log(p95),           std::log1p(pooling),       std::log1p(double(cfg.seq_len))};
}

void set_row_stats(LoadShape& load, std::vector<double> rows) {
  if (rows.empty()) return;
  std::sort(rows.begin(), rows.end());
  const double n = double(rows.size());
  load.mean_rows = 0;
  for (double r : rows) load.mean_rows += r / n;
  load.p95_rows = rows[std::min(rows.size() - 1, size_t(std::ceil(0.95 * n)) - 1)];
}

RecStreamInputs recstream_inputs(const RecModel& model, const Executor& executor,
                                 const LoadShape& load) {
  RecStreamInputs in;
  in.z = load_features(model.config(), load);
  const int64_t rows = std::max<int64_t>(
      1, std::llround(load.mean_rows > 0 ? load.mean_rows : double(model.config().query_size)));
  const ExecutorInfo info = executor.info();
  const Graph g = model.graph(rows, info.device);
  const std::vector<OpCost> cost = executor.predict_nodes(model, rows);
  const int64_t n = g.size();
  if (int64_t(cost.size()) != n)
    throw InvalidArgument(cat("RecStream: ", cost.size(), " node costs for ", n, " nodes"));
  in.x = {n, kNodeFeatures, std::vector<double>(size_t(n * kNodeFeatures), 0.0)};
  for (const auto& v : g.nodes()) {
    const OpCost& c = cost[size_t(v.id)];
    in.x.at(v.id, node_bucket(v.kind)) = 1;
    in.x.at(v.id, kNodeBuckets + 0) = std::log1p(v.flops);
    in.x.at(v.id, kNodeBuckets + 1) = std::log1p(v.bytes_moved());
    in.x.at(v.id, kNodeBuckets + 2) = std::log1p(c.us);
    in.x.at(v.id, kNodeBuckets + 3) = c.share;
    in.x.at(v.id, kNodeBuckets + 4 + int(c.cls)) = 1;  // kMem, kComp, kTiny
  }
  // Â = D^-1/2 (A + I) D^-1/2, A symmetrised (an edge counts once however often it appears).
  Matrix a{n, n, std::vector<double>(size_t(n * n), 0.0)};
  for (int64_t i = 0; i < n; ++i) a.at(i, i) = 1;
  for (const auto& [from, to] : g.edges()) a.at(from, to) = a.at(to, from) = 1;
  std::vector<double> d(size_t(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) d[size_t(i)] += a.at(i, j);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) a.at(i, j) /= std::sqrt(d[size_t(i)] * d[size_t(j)]);
  in.adj = std::move(a);
  return in;
}

RecStreamWeights parse_recstream_weights(const nlohmann::json& j, const std::string& source) {
  const detail::JsonField root(j, source, "");
  if (!j.is_object()) root.fail("expected an object");
  const std::string format = root.at("format").string();
  if (format != kWeightsFormat)
    root.at("format").fail(cat("expected \"", kWeightsFormat, "\", got ", format));
  const int64_t version = root.at("version").integer();
  if (version != kWeightsVersion)
    root.at("version").fail(
        cat("unsupported version ", version, " (this build reads ", kWeightsVersion, ")"));
  RecStreamWeights w;
  w.executor = root.at("executor").non_empty_string();
  w.device_class = root.at("device_class").non_empty_string();
  const detail::JsonField cf = root.at("configs");
  for (size_t i = 0; i < cf.array_size(); ++i) {
    try {
      w.configs.push_back(parse_stream_config(cf[i].string()));
    } catch (const InvalidArgument& e) {
      cf[i].fail(e.what());
    }
  }
  if (w.configs.empty()) cf.fail("expected at least one configuration");
  for (size_t i = 0; i < w.configs.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (w.configs[i].name() == w.configs[k].name())
        cf[i].fail(cat("configuration '", w.configs[i].name(), "' listed twice"));
  if (root.at("node_features").integer() != kNodeFeatures)
    root.at("node_features").fail(cat("expected ", kNodeFeatures, " (this build's node features)"));
  if (root.at("load_features").integer() != kLoadFeatures)
    root.at("load_features").fail(cat("expected ", kLoadFeatures, " (this build's load features)"));
  w.w1 = read_weight_matrix(root.at("W1"), kNodeFeatures, -1);
  const int64_t h = w.w1.cols;
  w.b1 = read_weight_vector(root.at("b1"), h);
  w.w2 = read_weight_matrix(root.at("W2"), h, h);
  w.b2 = read_weight_vector(root.at("b2"), h);
  w.wz = read_weight_matrix(root.at("Wz"), kLoadFeatures, -1);
  w.bz = read_weight_vector(root.at("bz"), w.wz.cols);
  w.wh = read_weight_matrix(root.at("Wh"), 2 * h + w.wz.cols, -1);
  w.bh = read_weight_vector(root.at("bh"), w.wh.cols);
  w.wo = read_weight_matrix(root.at("Wo"), w.wh.cols, int64_t(w.configs.size()));
  w.bo = read_weight_vector(root.at("bo"), w.wo.cols);
  for (auto it = j.begin(); it != j.end(); ++it) {
    static const char* known[] = {"format",
                                  "version",
                                  "executor",
                                  "device_class",
                                  "configs",
                                  "node_features",
                                  "load_features",
                                  "W1",
                                  "b1",
                                  "W2",
                                  "b2",
                                  "Wz",
                                  "bz",
                                  "Wh",
                                  "bh",
                                  "Wo",
                                  "bo"};
    if (std::find_if(std::begin(known), std::end(known),
                     [&](const char* k) { return it.key() == k; }) == std::end(known))
      w.meta[it.key()] = it.value();
  }
  return w;
}

RecStreamWeights load_recstream_weights(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw IoError(cat("cannot open RecStream weights '", path, "'"));
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::parse_error& e) {
    throw ParseError(path, -1, e.what());
  }
  return parse_recstream_weights(j, path);
}

double RecStreamPrediction::p99_ms(int c) const { return std::exp(log_p99_ms.at(size_t(c))); }

RecStreamPrediction recstream_predict(const RecStreamWeights& w, const RecStreamInputs& in) {
  const int64_t n = in.x.rows;
  if (n < 1 || in.x.cols != w.w1.rows || in.adj.rows != n || in.adj.cols != n ||
      int64_t(in.z.size()) != w.wz.rows)
    throw InvalidArgument(cat("RecStream: inputs X [", n, ", ", in.x.cols, "], Â [", in.adj.rows,
                              ", ", in.adj.cols, "], z [", in.z.size(), "] do not fit weights of ",
                              w.w1.rows, " node and ", w.wz.rows, " load features"));
  const Matrix h1 = gcn_affine(gcn_matmul(in.adj, in.x), w.w1, w.b1, true);
  const Matrix h2 = gcn_affine(gcn_matmul(in.adj, h1), w.w2, w.b2, true);
  const int64_t h = h2.cols;
  Matrix top{1, w.wh.rows, std::vector<double>(size_t(w.wh.rows), 0.0)};
  for (int64_t c = 0; c < h; ++c) {
    double sum = 0, mx = -std::numeric_limits<double>::infinity();
    for (int64_t r = 0; r < n; ++r) sum += h2.at(r, c), mx = std::max(mx, h2.at(r, c));
    top.at(0, c) = sum / double(n);
    top.at(0, h + c) = mx;
  }
  const Matrix u = gcn_affine(Matrix{1, int64_t(in.z.size()), in.z}, w.wz, w.bz, true);
  for (int64_t c = 0; c < u.cols; ++c) top.at(0, 2 * h + c) = u.at(0, c);
  const Matrix y = gcn_affine(gcn_affine(top, w.wh, w.bh, true), w.wo, w.bo, false);
  RecStreamPrediction p;
  p.log_p99_ms = y.v;
  p.best = int(std::min_element(p.log_p99_ms.begin(), p.log_p99_ms.end()) - p.log_p99_ms.begin());
  return p;
}

}  // namespace tandem::rec
