// SPDX-License-Identifier: Apache-2.0
// Tiles timed on the real engine, per-piece cost tables and plan replay
// (tandem/cnn/edge/measure.h).
#include "tandem/cnn/edge/measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "kernels/cpu_info.h"
#include "tandem/cnn/executor.h"
#include "tandem/core/cost_model.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

struct TileBench::Impl {
  explicit Impl(const Graph& g) : exec(g, {.threads = 1, .winograd = false}) {}
  Executor exec;
  std::vector<Tensor> tensors;  // every tensor of one whole run, by id
};

namespace {

// A fixed pseudo-random image in [-1, 1) (a constant image would make every tile alike).
Tensor test_image(const Shape& s) {
  std::vector<float> v(static_cast<size_t>(s.numel()));
  uint32_t x = 12345;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
  return Tensor::from_vector(std::move(v), s, DType::kF32);
}

}  // namespace

TileBench::TileBench(const Chain& chain, int repeats) : chain_(&chain), repeats_(repeats) {
  if (repeats < 1) throw InvalidArgument(cat("tile bench: repeats must be >= 1, got ", repeats));
  const Graph& g = chain.graph();
  // The whole run keeps every tensor; the timing executor reuses buffers as cnn.tiles does.
  Executor all(g, {.threads = 1, .keep_all = true, .winograd = false});
  all.run({test_image(g.tensor(g.inputs().at(0)).shape)});
  impl_ = std::make_unique<Impl>(g);
  impl_->tensors = all.tensors();
}

TileBench::~TileBench() = default;

double TileBench::time_region(int first, int last, const Region& out, int64_t c0, int64_t c1) {
  const Graph& g = chain_->graph();
  const int in = chain_->piece(first).in_tensor;
  const int to = chain_->piece(last).out_tensor;
  const std::vector<int> nodes = chain_->segment_nodes(first, last);
  const Tensor& x = impl_->tensors.at(static_cast<size_t>(in));
  const std::map<int, Tile> inputs{{in, Tile{x, full_region(g.tensor(in).shape)}}};
  const Region want = out.empty() ? full_region(g.tensor(to).shape) : out;
  std::map<int, Channels> channels;
  if (c1 > c0) channels[to] = Channels{c0, c1};
  double best = 1e300;
  for (int r = 0; r <= repeats_; ++r) {  // r = 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    impl_->exec.run_region(nodes, inputs, {{to, want}}, channels);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

double TileBench::host_s(int first, int last, const Region& out, int64_t c0, int64_t c1) {
  const auto key = std::make_tuple(first, last, out.h0, out.h1, out.w0, out.w1, c0, c1);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  return cache_[key] = time_region(first, last, out, c0, c1);
}

nlohmann::json PieceProfile::to_json() const {
  nlohmann::json p = nlohmann::json::array();
  for (const PieceTimes& t : pieces) p.push_back({{"fraction", t.fraction}, {"host_s", t.host_s}});
  return {{"host", host}, {"threads", 1}, {"pieces", p}};
}

PieceProfile PieceProfile::from_json(const nlohmann::json& j, int n) {
  if (!j.is_object() || !j.contains("pieces") || !j["pieces"].is_array())
    throw InvalidArgument("piece profile: 'pieces' must be an array");
  if (static_cast<int>(j["pieces"].size()) != n)
    throw InvalidArgument(cat("piece profile: ", j["pieces"].size(), " pieces, the model has ", n,
                              " (profiled for another model?)"));
  PieceProfile p;
  p.host = j.value("host", "");
  for (size_t i = 0; i < j["pieces"].size(); ++i) {
    const auto& e = j["pieces"][i];
    auto numbers = [&](const char* key) {
      if (!e.is_object() || !e.contains(key) || !e[key].is_array() || e[key].empty())
        throw InvalidArgument(
            cat("piece profile: piece ", i, ": '", key, "' must be a non-empty array"));
      std::vector<double> v;
      for (const auto& x : e[key]) {
        if (!x.is_number() || !(x.get<double>() >= 0) || !std::isfinite(x.get<double>()))
          throw InvalidArgument(
              cat("piece profile: piece ", i, ": '", key, "' holds a non-number or negative"));
        v.push_back(x.get<double>());
      }
      return v;
    };
    PieceTimes t{numbers("fraction"), numbers("host_s")};
    if (t.fraction.size() != t.host_s.size() ||
        !std::is_sorted(t.fraction.begin(), t.fraction.end()) || t.fraction.front() <= 0)
      throw InvalidArgument(cat("piece profile: piece ", i,
                                ": 'fraction' must be ascending, positive and as long as "
                                "'host_s'"));
    p.pieces.push_back(std::move(t));
  }
  return p;
}

PieceProfile profile_pieces(TileBench& bench) {
  const Chain& c = bench.chain();
  PieceProfile p;
  p.host = cpu::cpu_info().model;
  for (int i = 0; i < c.size(); ++i) {
    const Piece& pc = c.piece(i);
    const Region full = c.out_region(i);
    PieceTimes t;
    if (pc.spatial && full.rows() >= 8) {
      for (int div : {8, 4, 2, 1}) {
        const int64_t rows = full.rows() / div;
        t.fraction.push_back(static_cast<double>(rows) / static_cast<double>(full.rows()));
        t.host_s.push_back(bench.host_s(i, i, Region{0, rows, full.w0, full.w1}));
      }
    } else {
      t.fraction = {1.0};
      t.host_s = {bench.host_s(i, i, pc.spatial ? full : Region{})};
    }
    p.pieces.push_back(std::move(t));
  }
  return p;
}

namespace {

// Piecewise-linear in the fraction; below the first point the line through the first two (or
// through the origin for a one-point table), clamped at 0.
double interpolate(const PieceTimes& t, double f) {
  const auto& x = t.fraction;
  const auto& y = t.host_s;
  if (x.size() == 1) return y[0] * f / x[0];
  size_t k = 1;
  while (k + 1 < x.size() && f > x[k]) ++k;
  const double slope = (y[k] - y[k - 1]) / (x[k] - x[k - 1]);
  return std::max(0.0, y[k - 1] + slope * (f - x[k - 1]));
}

}  // namespace

ProfiledCostModel::ProfiledCostModel(const Chain& chain, PieceProfile profile)
    : chain_(&chain), profile_(std::move(profile)) {
  if (static_cast<int>(profile_.pieces.size()) != chain.size())
    throw InvalidArgument(cat("profiled cost model: the profile has ", profile_.pieces.size(),
                              " pieces, the model ", chain.size()));
  piece_of_node_.assign(static_cast<size_t>(chain.graph().nodes().size()), -1);
  for (int i = 0; i < chain.size(); ++i)
    for (int n : chain.piece(i).nodes) piece_of_node_.at(static_cast<size_t>(n)) = i;
}

double ProfiledCostModel::host_s(const TileWork& work) const {
  // A piece's computed fraction: what its last node (the producer of its output map) writes,
  // over the whole map.
  double s = 0;
  for (const NodeWork& n : work.nodes) {
    const int p = piece_of_node_.at(static_cast<size_t>(n.node));
    if (p < 0 || n.node != chain_->piece(p).nodes.back()) continue;
    const Piece& pc = chain_->piece(p);
    const double f = pc.out_bytes > 0 ? n.out_bytes / pc.out_bytes : 1.0;
    s += interpolate(profile_.pieces[static_cast<size_t>(p)], f);
  }
  return s;
}

double ProfiledCostModel::compute_s(const TileWork& work, const DeviceProfile& device) const {
  return on_device_s(host_s(work), device);
}

double TimedCostModel::compute_s(const TileWork& w, const DeviceProfile& device) const {
  return on_device_s(bench_->host_s(w.first, w.last, w.out, w.c0, w.c1), device);
}

Metrics replay(const EdgePlan& plan, const EdgeProblem& problem, TileBench& bench) {
  if (&bench.chain() != problem.chain)
    throw InvalidArgument("replay: the tile bench was built for another chain");
  const TimedCostModel cost(bench);
  EdgeProblem measured = problem;
  measured.cost = &cost;
  EdgePlan p = plan;
  evaluate(p, measured, plan.metrics.lambda);
  p.metrics.planner_s = plan.metrics.planner_s;
  return p.metrics;
}

}  // namespace tandem::cnn::edge
