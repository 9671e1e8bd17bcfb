// SPDX-License-Identifier: Apache-2.0
// DBAC density clustering on the token axis and the ClusterAttn parameter file (kv_policies.h).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/json.h"
#include "tandem/llm/kv_policies.h"

namespace tandem::llm {

std::vector<TokenCluster> dbac_clusters(std::span<const float> x, const DbacParams& p) {
  if (p.eps < 0 || !(p.rho >= 0) || p.min_len < 0) {
    throw InvalidArgument(cat("dbac_clusters: eps ", p.eps, ", rho ", p.rho, ", min_len ",
                              p.min_len, " (need eps >= 0, rho >= 0, min_len >= 0)"));
  }
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<TokenCluster> out;
  if (n == 0) return out;
  std::vector<double> prefix(static_cast<size_t>(n + 1), 0.0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + x[i];
  std::vector<double> m(static_cast<size_t>(n));
  double mean = 0;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t lo = std::max<int64_t>(0, j - p.eps), hi = std::min<int64_t>(n, j + p.eps + 1);
    m[j] = prefix[hi] - prefix[lo];
    mean += m[j];
  }
  mean /= static_cast<double>(n);
  const double threshold = p.rho * mean;
  int64_t first = -1, last = -1;  // current run of core points
  auto close = [&]() {
    if (first < 0) return;
    TokenCluster c{std::max<int64_t>(0, first - p.eps), std::min<int64_t>(n, last + p.eps + 1), 0};
    if (!out.empty() && c.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, c.end);
    } else {
      out.push_back(c);
    }
  };
  for (int64_t j = 0; j < n; ++j) {
    if (m[j] < threshold || m[j] <= 0) continue;
    if (first >= 0 && j - last <= std::max(p.eps, 1)) {
      last = j;
    } else {
      close();
      first = last = j;
    }
  }
  close();
  std::vector<TokenCluster> kept;
  for (TokenCluster& c : out) {
    if (c.end - c.begin < p.min_len) continue;
    c.mass = prefix[c.end] - prefix[c.begin];
    kept.push_back(c);
  }
  return kept;
}

ClusterAttnParams load_clusterattn_params(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw NotFound("ClusterAttn calibration file '" + path + "' cannot be opened");
  nlohmann::json j;
  try {
    j = read_json_file(path);
  } catch (const IoError& e) {
    throw IoError(cat("ClusterAttn calibration: ", e.what()));
  }
  if (!j.is_object()) throw ParseError(path, 0, "the top level must be a JSON object");
  ClusterAttnParams p;
  auto get_int = [&](const char* key, int& v, int lo, int hi) {
    if (!j.contains(key)) return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo || j[key].get<int64_t>() > hi) {
      throw ParseError(path, 0,
                       cat("field '", key, "' must be an integer in [", lo, ", ", hi, "]"));
    }
    v = j[key].get<int>();
  };
  get_int("window", p.window, 0, 1 << 20);
  get_int("pool", p.pool, 0, 1 << 10);
  get_int("eps", p.dbac.eps, 0, 1 << 20);
  get_int("min_len", p.dbac.min_len, 0, 1 << 20);
  if (j.contains("rho")) {
    if (!j["rho"].is_number() || !(j["rho"].get<double>() >= 0) || j["rho"].get<double>() > 1e6) {
      throw ParseError(path, 0, "field 'rho' must be a number in [0, 1e6]");
    }
    p.dbac.rho = j["rho"].get<double>();
  }
  for (const auto& [key, field] :
       {std::pair{"per_head_fixed", &p.per_head_fixed}, std::pair{"fill", &p.fill}}) {
    if (!j.contains(key)) continue;
    if (!j[key].is_boolean())
      throw ParseError(path, 0, cat("field '", key, "' must be true or false"));
    *field = j[key].get<bool>();
  }
  // Checked last so that a bad field is named first; `{}` or another policy's file (a QoKV
  // calibration) would otherwise silently give the defaults.
  if (!j.contains("policy") || j["policy"] != "clusterattn") {
    throw ParseError(path, 0,
                     "field 'policy' must be \"clusterattn\" (not a ClusterAttn calibration "
                     "file; `tandem kv-calibrate` writes one)");
  }
  return p;
}

void save_clusterattn_params(const std::string& path, const ClusterAttnParams& p,
                             const std::string& note) {
  nlohmann::json j{{"policy", "clusterattn"},
                   {"window", p.window},
                   {"pool", p.pool},
                   {"eps", p.dbac.eps},
                   {"rho", p.dbac.rho},
                   {"min_len", p.dbac.min_len},
                   {"per_head_fixed", p.per_head_fixed},
                   {"fill", p.fill}};
  if (!note.empty()) j["note"] = note;
  std::ofstream out(path);
  if (!out) throw IoError("cannot write the ClusterAttn calibration file '" + path + "'");
  out << j.dump(2) << "\n";
  if (!out) throw IoError("writing the ClusterAttn calibration file '" + path + "' failed");
}

}  // namespace tandem::llm
