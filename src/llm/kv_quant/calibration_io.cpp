// SPDX-License-Identifier: Apache-2.0
// QoKV calibration files (JSON): writing, and reading with a clear error for every malformed
// field. See kv_quant.h.
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tandem/core/error.h"
#include "tandem/core/json.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

constexpr const char* kFormat = "tandem-qokv-calibration";
constexpr size_t kMaxGroups = 1024;

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw InvalidArgument(cat("QoKV calibration ", where, ": ", what));
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where,
                            const std::string& path) {
  if (!j.is_object() || !j.contains(key)) fail(where, cat("missing field '", path, key, "'"));
  return j.at(key);
}

int positive_int(const nlohmann::json& j, const char* key, const std::string& where) {
  const auto& v = field(j, key, where, "");
  if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
    fail(where, cat("'", key, "' must be a positive integer, got ", v.dump()));
  }
  return v.get<int>();
}

std::vector<float> scale_vector(const nlohmann::json& v, int d, const std::string& where,
                                const std::string& path) {
  if (!v.is_array() || static_cast<int>(v.size()) != d) {
    fail(where, cat("'", path, "' must be an array of ", d, " numbers"));
  }
  std::vector<float> out;
  for (const auto& e : v) {
    // Stored as f32: a double past FLT_MAX would become inf, one below the smallest f32 zero.
    const double x = e.is_number() ? e.get<double>() : 0.0;
    if (!(x > 0 && x <= std::numeric_limits<float>::max()) || !(static_cast<float>(x) > 0)) {
      fail(where, cat("'", path, "' holds ", e.dump(), " (scales are f32 numbers > 0)"));
    }
    out.push_back(static_cast<float>(x));
  }
  return out;
}

}  // namespace

void save_qokv_calibration(const QokvCalibration& c, const std::string& path) {
  nlohmann::json j;
  j["format"] = kFormat;
  j["version"] = 1;
  j["model"] = c.model;
  j["n_layers"] = c.n_layers;
  j["n_kv_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  if (c.value_group >= 0) j["value_group"] = c.value_group;
  j["layers"] = nlohmann::json::array();
  for (const auto& l : c.layers) {
    j["layers"].push_back(
        {{"group_fractions", l.group_fractions}, {"k_scale", l.k_scale}, {"v_scale", l.v_scale}});
  }
  std::ofstream out(path);
  if (!out) throw IoError(cat("save_qokv_calibration: cannot write '", path, "'"));
  out << j.dump(1) << "\n";
  if (!out) throw IoError(cat("save_qokv_calibration: writing '", path, "' failed"));
}

QokvCalibration parse_qokv_calibration(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = parse_json(text, where);
  } catch (const ParseError& e) {
    fail(where, cat("not JSON (", e.what(), ")"));
  }
  const auto& fmt = field(j, "format", where, "");
  if (!fmt.is_string() || fmt.get<std::string>() != kFormat) {
    fail(where, cat("'format' is ", fmt.dump(), ", expected \"", kFormat, "\""));
  }
  const auto& ver = field(j, "version", where, "");
  if (!ver.is_number_integer() || ver.get<int64_t>() != 1) {  // int64: 2^32 + 1 is not 1
    fail(where, cat("'version' ", ver.dump(), " is not supported (1)"));
  }
  QokvCalibration c;
  if (j.contains("model") && j["model"].is_string()) c.model = j["model"].get<std::string>();
  c.n_layers = positive_int(j, "n_layers", where);
  c.n_kv_heads = positive_int(j, "n_kv_heads", where);
  c.head_dim = positive_int(j, "head_dim", where);
  if (j.contains("value_group")) {  // optional: absent in files written before it existed
    const auto& vg = j["value_group"];
    if (!vg.is_number_integer() || vg.get<int64_t>() < 0 || vg.get<int64_t>() > 4096) {
      fail(where, cat("'value_group' must be an integer in 0..4096 (0: symmetric values), got ",
                      vg.dump()));
    }
    c.value_group = vg.get<int>();
  }
  const auto& layers = field(j, "layers", where, "");
  if (!layers.is_array() || static_cast<int>(layers.size()) != c.n_layers) {
    fail(where, cat("'layers' must be an array of n_layers = ", c.n_layers, " entries"));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = cat("layers[", l, "].");
    const auto& lj = layers[static_cast<size_t>(l)];
    QokvLayerCalibration lc;
    const auto& fr = field(lj, "group_fractions", where, p);
    if (!fr.is_array() || fr.empty() || fr.size() > kMaxGroups) {
      fail(where, cat("'", p, "group_fractions' must be an array of 1 to ", kMaxGroups,
                      " fractions, got ", fr.is_array() ? cat(fr.size(), " entries") : fr.dump()));
    }
    double sum = 0;
    for (const auto& e : fr) {
      if (!e.is_number() || !std::isfinite(e.get<double>()) || e.get<double>() < 0) {
        fail(where, cat("'", p, "group_fractions' holds ", e.dump(), " (fractions are >= 0)"));
      }
      lc.group_fractions.push_back(e.get<double>());
      sum += e.get<double>();
    }
    if (std::fabs(sum - 1.0) > 1e-3) {
      fail(where, cat("'", p, "group_fractions' sum to ", sum, ", not 1"));
    }
    for (const char* key : {"k_scale", "v_scale"}) {
      const auto& sv = field(lj, key, where, p);
      if (!sv.is_array() || static_cast<int>(sv.size()) != c.n_kv_heads) {
        fail(where,
             cat("'", p, key, "' must be an array of n_kv_heads = ", c.n_kv_heads, " vectors"));
      }
      auto& dst = key[0] == 'k' ? lc.k_scale : lc.v_scale;
      for (int h = 0; h < c.n_kv_heads; ++h) {
        dst.push_back(
            scale_vector(sv[static_cast<size_t>(h)], c.head_dim, where, cat(p, key, "[", h, "]")));
      }
    }
    c.layers.push_back(std::move(lc));
  }
  return c;
}

QokvCalibration load_qokv_calibration(const std::string& path) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const IoError& e) {
    throw IoError(cat("QoKV calibration: ", e.what()));
  }
  return parse_qokv_calibration(text, "'" + path + "'");
}

}  // namespace tandem::llm
