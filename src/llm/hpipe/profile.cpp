// SPDX-License-Identifier: Apache-2.0
// HPipe profiling (hpipe_profile.h): times one decoder layer through Model::forward_layers at a
// grid of slice and context lengths and fits the TeraPipe-style latency model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <random>

#include "../sha256.h"
#include "core/clock.h"
#include "core/json_reader.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/hpipe_profile.h"
#include "tandem/llm/model.h"

namespace tandem::llm::hpipe {
namespace {

// ParseError from "source: what" (the source is everything before the first ": ").
ParseError parse_error(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return ParseError(message, -1, "malformed");
  return ParseError(message.substr(0, colon), -1, message.substr(colon + 2));
}

Tensor random_hidden(int64_t t, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(t * d));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, {t, d}, DType::kF32);
}

std::vector<int32_t> range_positions(int64_t start, int64_t n) {
  std::vector<int32_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>(start + i);
  return p;
}

// Solves the k x k system m x = b (Gaussian elimination with partial pivoting); zeros when
// singular.
std::vector<double> solve(std::vector<std::vector<double>> m, std::vector<double> b) {
  const size_t k = b.size();
  for (size_t col = 0; col < k; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < k; ++r) {
      if (std::abs(m[r][col]) > std::abs(m[piv][col])) piv = r;
    }
    if (std::abs(m[piv][col]) < 1e-300) return std::vector<double>(k, 0.0);
    std::swap(m[piv], m[col]);
    std::swap(b[piv], b[col]);
    for (size_t r = 0; r < k; ++r) {
      if (r == col) continue;
      const double f = m[r][col] / m[col][col];
      for (size_t q = 0; q < k; ++q) m[r][q] -= f * m[col][q];
      b[r] -= f * b[col];
    }
  }
  std::vector<double> x(k);
  for (size_t r = 0; r < k; ++r) x[r] = b[r] / m[r][r];
  return x;
}

double number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_number()) {
    throw parse_error(cat(where, ": '", key, "' missing or not a number"));
  }
  const double v = j[key].get<double>();
  if (!std::isfinite(v)) throw parse_error(cat(where, ": '", key, "' is not finite"));
  return v;
}

}  // namespace

double LayerTimeFit::predict_s(double s, double c) const {
  double base = 0;
  if (!s_grid.empty()) {
    if (s <= s_grid.front()) {
      base = base_s.front() * s / s_grid.front();
    } else if (s >= s_grid.back()) {
      const double sm = s_grid.back();
      base = base_s.back() * s / sm + std::max(0.0, a_sc) * (s * s - sm * s) / 2;
    } else {
      const size_t i =
          static_cast<size_t>(std::upper_bound(s_grid.begin(), s_grid.end(), s) - s_grid.begin());
      const double f = (s - s_grid[i - 1]) / (s_grid[i] - s_grid[i - 1]);
      base = base_s[i - 1] + f * (base_s[i] - base_s[i - 1]);
    }
  }
  return std::max(0.0, base + a_s * s + a_c * c + a_sc * s * c);
}

nlohmann::json LayerTimeFit::to_json() const {
  return {{"s_grid", s_grid}, {"base_s", base_s}, {"a_s", a_s}, {"a_c", a_c}, {"a_sc", a_sc}};
}

LayerTimeFit LayerTimeFit::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw parse_error(cat(where, ": expected an object"));
  LayerTimeFit f;
  try {
    f.s_grid = j.at("s_grid").get<std::vector<double>>();
    f.base_s = j.at("base_s").get<std::vector<double>>();
  } catch (const nlohmann::json::exception& e) {
    throw parse_error(cat(where, ": s_grid / base_s: ", e.what()));
  }
  if (f.s_grid.empty() || f.s_grid.size() != f.base_s.size()) {
    throw parse_error(cat(where, ": s_grid and base_s must be non-empty and of equal length"));
  }
  for (size_t i = 0; i < f.s_grid.size(); ++i) {
    if (!(f.s_grid[i] > 0) || (i > 0 && f.s_grid[i] <= f.s_grid[i - 1]) || !(f.base_s[i] >= 0)) {
      throw parse_error(cat(where, ": s_grid[", i, "] / base_s[", i,
                            "]: need ascending positive lengths and non-negative times"));
    }
  }
  f.a_s = number(j, "a_s", where);
  f.a_c = number(j, "a_c", where);
  f.a_sc = number(j, "a_sc", where);
  return f;
}

nlohmann::json ModelProfile::to_json() const {
  return {{"version", 1},
          {"model_name", model_name},
          {"model_path", model_path},
          {"sha256", sha256},
          {"n_layers", n_layers},
          {"d_model", d_model},
          {"d_ff", d_ff},
          {"vocab_size", vocab_size},
          {"threads", threads},
          {"layer_weight_bytes", layer_weight_bytes},
          {"embed_bytes", embed_bytes},
          {"head_bytes", head_bytes},
          {"kv_bytes_per_token_layer", kv_bytes_per_token_layer},
          {"act_bytes_per_token", act_bytes_per_token},
          {"head_row_s", head_row_s},
          {"layer", layer.to_json()},
          {"fit_mean_rel_error", fit_mean_rel_error},
          {"samples", samples}};
}

ModelProfile ModelProfile::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw parse_error(cat(where, ": expected a JSON object"));
  ModelProfile p;
  auto str = [&](const char* k) {
    if (!j.contains(k) || !j[k].is_string()) throw parse_error(cat(where, ": '", k, "' missing"));
    return j[k].get<std::string>();
  };
  p.model_name = str("model_name");
  p.model_path = str("model_path");
  p.sha256 = str("sha256");
  auto positive_int = [&](const char* k) {
    const double v = number(j, k, where);
    if (v < 1 || v > 1e9 || v != std::floor(v)) {
      throw parse_error(cat(where, ": '", k, "' must be a positive integer, got ", v));
    }
    return static_cast<int64_t>(v);
  };
  p.n_layers = static_cast<int>(positive_int("n_layers"));
  p.d_model = static_cast<int>(positive_int("d_model"));
  p.d_ff = static_cast<int>(positive_int("d_ff"));
  p.vocab_size = positive_int("vocab_size");
  p.threads = static_cast<int>(positive_int("threads"));
  auto non_negative = [&](const char* k) {
    const double v = number(j, k, where);
    if (v < 0) throw parse_error(cat(where, ": '", k, "' is negative"));
    return v;
  };
  p.layer_weight_bytes = non_negative("layer_weight_bytes");
  p.embed_bytes = non_negative("embed_bytes");
  p.head_bytes = non_negative("head_bytes");
  p.kv_bytes_per_token_layer = non_negative("kv_bytes_per_token_layer");
  p.act_bytes_per_token = non_negative("act_bytes_per_token");
  p.head_row_s = non_negative("head_row_s");
  if (!j.contains("layer")) throw parse_error(cat(where, ": 'layer' missing"));
  p.layer = LayerTimeFit::from_json(j["layer"], where + ": layer");
  if (j.contains("fit_mean_rel_error")) p.fit_mean_rel_error = non_negative("fit_mean_rel_error");
  if (j.contains("samples") && j["samples"].is_array()) {
    for (const auto& s : j["samples"]) p.samples.push_back(s);
  }
  return p;
}

ModelProfile ModelProfile::load(const std::string& path) {
  return from_json(detail::read_json_file(path), path);
}

void ModelProfile::save(const std::string& path) const {
  detail::write_text_file(path, to_json().dump(2) + "\n");
}

ModelProfile profile_model(const Model& model, const std::string& path,
                           const ProfileOptions& options) {
  const ModelConfig& c = model.config();
  if (options.slice_lengths.empty()) throw InvalidArgument("profile_model: no slice lengths");
  if (options.repeats < 1 || options.threads < 1) {
    throw InvalidArgument("profile_model: repeats and threads must be >= 1");
  }
  if (options.layer < 0 || options.layer >= c.n_layers) {
    throw InvalidArgument(cat("profile_model: layer ", options.layer, " outside the model's ",
                              c.n_layers, " layers"));
  }
  std::vector<int> s_grid = options.slice_lengths;
  std::sort(s_grid.begin(), s_grid.end());
  s_grid.erase(std::unique(s_grid.begin(), s_grid.end()), s_grid.end());
  const int max_c =
      options.context_lengths.empty()
          ? 0
          : *std::max_element(options.context_lengths.begin(), options.context_lengths.end());
  if (s_grid.front() < 1 || (c.context_length > 0 && s_grid.back() + max_c > c.context_length)) {
    throw InvalidArgument(cat("profile_model: slice ", s_grid.back(), " + context ", max_c,
                              " outside the model's context of ", c.context_length, " tokens"));
  }
  ModelProfile p;
  p.model_name = c.name.empty() ? std::filesystem::path(path).filename().string() : c.name;
  p.model_path = path;
  p.sha256 = sha256_file(path);
  p.n_layers = c.n_layers;
  p.d_model = c.d_model;
  p.d_ff = c.d_ff;
  p.vocab_size = c.vocab_size;
  p.threads = options.threads;
  const LayerWeights& w = model.layer(options.layer);
  for (const Tensor* t :
       {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down}) {
    if (t->defined()) p.layer_weight_bytes += static_cast<double>(t->nbytes());
  }
  p.embed_bytes = static_cast<double>(model.token_embd().nbytes());
  p.head_bytes = static_cast<double>(model.output_norm().nbytes()) +
                 (model.output_tied() ? 0.0 : static_cast<double>(model.output().nbytes()));
  p.kv_bytes_per_token_layer = 2.0 * c.n_kv_heads * c.head_dim * 4.0;
  p.act_bytes_per_token = 4.0 * c.d_model;

  const int saved_threads = cpu_num_threads();
  set_cpu_num_threads(options.threads);
  struct Restore {
    int n;
    ~Restore() { set_cpu_num_threads(n); }
  } restore{saved_threads};

  const int l = options.layer;
  Model::LayerRangeOptions layer_only;
  // Best-of-repeats time of one layer on s new tokens after c cached ones.
  auto time_layer = [&](int s, int ctx) {
    double best = 1e300;
    for (int r = 0; r < options.repeats; ++r) {
      KvCache cache = model.make_cache();
      if (ctx > 0) {
        const auto pos = range_positions(0, ctx);
        model.forward_layers(random_hidden(ctx, c.d_model, 7), pos, cache, l, l + 1, layer_only);
      }
      const Tensor x = random_hidden(s, c.d_model, 11 + r);
      const auto pos = range_positions(ctx, s);
      const double t0 = monotonic_s();
      model.forward_layers(x, pos, cache, l, l + 1, layer_only);
      best = std::min(best, monotonic_s() - t0);
    }
    return best;
  };
  time_layer(s_grid.front(), 0);  // warm-up (page in the weights)
  struct Point {
    double s, c, t;
    size_t si;  // index of s in s_grid
  };
  std::vector<Point> pts;
  for (size_t i = 0; i < s_grid.size(); ++i) {
    p.layer.s_grid.push_back(s_grid[i]);
    pts.push_back({double(s_grid[i]), 0.0, time_layer(s_grid[i], 0), i});
  }
  for (int ctx : options.context_lengths) {
    if (ctx <= 0) continue;
    for (size_t i = 0; i < s_grid.size(); ++i) {
      pts.push_back({double(s_grid[i]), double(ctx), time_layer(s_grid[i], ctx), i});
    }
  }
  // Joint least squares over every point: one base(s) per measured s, plus a_c and a_sc. Each
  // base(s) then draws on all context lengths, so one lucky (or unlucky) c = 0 run does not set
  // the curve alone. The spec's b s term is not fitted: at batch 1 it is part of base(s).
  const size_t ks = s_grid.size(), k = ks + 2;
  std::vector<std::vector<double>> m(k, std::vector<double>(k, 0.0));
  std::vector<double> b(k, 0.0);
  for (const Point& q : pts) {
    std::vector<double> f(k, 0.0);
    f[q.si] = 1.0;
    f[ks] = q.c;
    f[ks + 1] = q.s * q.c;
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; j < k; ++j) m[i][j] += f[i] * f[j];
      b[i] += f[i] * q.t;
    }
  }
  for (size_t i = 0; i < k; ++i) m[i][i] *= 1.0 + 1e-9;  // ridge against collinear grids
  const std::vector<double> x = solve(m, b);
  p.layer.base_s.assign(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(ks));
  for (double& v : p.layer.base_s) v = std::max(v, 0.0);
  p.layer.a_c = x[ks];
  p.layer.a_sc = x[ks + 1];
  double err = 0;
  for (const Point& q : pts) {
    const double pred = p.layer.predict_s(q.s, q.c);
    err += std::abs(pred - q.t) / q.t;
    p.samples.push_back({{"s", q.s}, {"c", q.c}, {"measured_s", q.t}, {"predicted_s", pred}});
  }
  p.fit_mean_rel_error = err / static_cast<double>(pts.size());

  {  // the head for one row (last_only), timed through a 0-layer range
    KvCache cache = model.make_cache();
    const auto pos = range_positions(0, 1);
    Model::LayerRangeOptions head{.head = true, .last_only = true};
    const Tensor x = random_hidden(1, c.d_model, 3);
    double best = 1e300;
    for (int r = 0; r < options.repeats + 1; ++r) {
      const double t0 = monotonic_s();
      model.forward_layers(x, pos, cache, l, l, head);
      best = std::min(best, monotonic_s() - t0);
    }
    p.head_row_s = best;
  }
  return p;
}

}  // namespace tandem::llm::hpipe
