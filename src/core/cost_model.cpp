// SPDX-License-Identifier: Apache-2.0
// Roofline and profiled-table cost models, and their error report against measurements.
#include "tandem/core/cost_model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem {

double on_device_s(double host_s, double speed_factor) {
  if (!(speed_factor > 0) || !std::isfinite(speed_factor))
    throw InvalidArgument(cat("speed_factor must be positive and finite, got ", speed_factor));
  return host_s / speed_factor;
}

double on_device_s(double host_s, const DeviceProfile& device) {
  return on_device_s(host_s, device.speed_factor);
}

double CostModel::predict_transfer_s(double bytes, const LinkProfile& link) const {
  if (!(bytes >= 0) || !std::isfinite(bytes))
    throw InvalidArgument(cat("predict_transfer_s: bytes must be non-negative, got ", bytes));
  if (!(link.bandwidth_bytes_per_s > 0))
    throw InvalidArgument(cat("link '", link.from, "' -> '", link.to,
                              "' has bandwidth_bytes_per_s ", link.bandwidth_bytes_per_s));
  return link.transfer_time_s(bytes);
}

double CostModel::predict_graph_s(const Graph& graph, const DeviceProfile& device) const {
  graph.validate();
  double total = 0;
  for (int id : graph.topological_order()) total += predict_op_s(graph.node(id), device);
  return total;
}

// ---- roofline ----

RooflineCostModel::RooflineCostModel(RooflineOptions options) : options_(std::move(options)) {
  auto bad = [](double e) { return !std::isfinite(e) || e <= 0; };
  if (bad(options_.default_efficiency))
    throw InvalidArgument(cat("RooflineOptions.default_efficiency must be in (0, 1], got ",
                              options_.default_efficiency));
  for (const auto& [kind, e] : options_.efficiency)
    if (bad(e))
      throw InvalidArgument(
          cat("RooflineOptions.efficiency['", kind, "'] must be in (0, 1], got ", e));
  if (!std::isfinite(options_.launch_overhead_s) || options_.launch_overhead_s < 0)
    throw InvalidArgument(
        cat("RooflineOptions.launch_overhead_s must be >= 0, got ", options_.launch_overhead_s));
}

double RooflineCostModel::efficiency(const std::string& kind) const {
  auto it = options_.efficiency.find(kind);
  return it == options_.efficiency.end() ? options_.default_efficiency : it->second;
}

double RooflineCostModel::predict_op_s(const OpNode& node, const DeviceProfile& device) const {
  const double bytes = node.bytes_moved();
  if (node.flops <= 0 && bytes <= 0) return 0.0;
  if (!(device.peak_flops > 0))
    throw InvalidArgument(
        cat("roofline: device '", device.name, "' has peak_flops ", device.peak_flops));
  if (!(device.mem_bandwidth_bytes_per_s > 0))
    throw InvalidArgument(cat("roofline: device '", device.name, "' has mem_bandwidth_bytes_per_s ",
                              device.mem_bandwidth_bytes_per_s));
  const double compute_s = node.flops / device.peak_flops;
  const double memory_s = bytes / device.mem_bandwidth_bytes_per_s;
  return std::max(compute_s, memory_s) / efficiency(node.kind) + options_.launch_overhead_s;
}

// ---- profiled tables ----

namespace {

// Kind plus the non-numeric parameters (dtype strings, flags): entries interpolate only within a
// class.
std::string op_class(const OpNode& node) {
  std::string s = node.kind;
  for (const auto& [k, v] : node.attrs) {
    if (v.is_string()) s += cat("|", k, "=", v.get<std::string>());
    if (v.is_boolean()) s += cat("|", k, "=", v.get<bool>() ? 1 : 0);
  }
  return s;
}

std::string key_kind(const std::string& key) { return key.substr(0, key.find(':')); }

}  // namespace

ProfiledCostModel::ProfiledCostModel(RooflineOptions fallback) : fallback_(std::move(fallback)) {}

ProfiledCostModel::Prediction ProfiledCostModel::predict(const OpNode& node,
                                                         const DeviceProfile& device) const {
  if (node.flops <= 0 && node.bytes_moved() <= 0) return {0.0, Source::kNoCost};
  if (auto it = device.op_latency_s.find(op_key(node)); it != device.op_latency_s.end())
    return {it->second, Source::kExact};

  if (node.flops > 0) {
    const std::string cls = op_class(node);
    std::vector<std::pair<double, double>> points;  // (flops, seconds)
    for (const auto& [key, seconds] : device.op_latency_s) {
      if (key_kind(key) != node.kind) continue;
      OpNode entry;
      try {
        entry = node_from_op_key(key);
      } catch (const Error& e) {
        log().debug("profiled cost model: table entry '{}' of '{}' skipped: {}", key, device.name,
                    e.what());
        continue;
      }
      if (entry.flops > 0 && op_class(entry) == cls) points.emplace_back(entry.flops, seconds);
    }
    std::sort(points.begin(), points.end());
    // Entries with equal FLOPs (e.g. m and n swapped) are averaged.
    std::vector<std::pair<double, double>> merged;
    for (size_t i = 0; i < points.size();) {
      size_t j = i;
      double sum = 0;
      for (; j < points.size() && points[j].first == points[i].first; ++j) sum += points[j].second;
      merged.emplace_back(points[i].first, sum / static_cast<double>(j - i));
      i = j;
    }
    const double f = node.flops;
    for (size_t i = 0; i < merged.size(); ++i) {
      if (merged[i].first == f) return {merged[i].second, Source::kInterpolated};
      if (i + 1 < merged.size() && merged[i].first < f && f < merged[i + 1].first) {
        const auto [f0, t0] = merged[i];
        const auto [f1, t1] = merged[i + 1];
        return {t0 + (t1 - t0) * (f - f0) / (f1 - f0), Source::kInterpolated};
      }
    }
  }
  return {fallback_.predict_op_s(node, device), Source::kRoofline};
}

double ProfiledCostModel::predict_op_s(const OpNode& node, const DeviceProfile& device) const {
  return predict(node, device).seconds;
}

const char* to_string(ProfiledCostModel::Source s) {
  switch (s) {
    case ProfiledCostModel::Source::kExact:
      return "exact";
    case ProfiledCostModel::Source::kInterpolated:
      return "interpolated";
    case ProfiledCostModel::Source::kRoofline:
      return "roofline";
    case ProfiledCostModel::Source::kNoCost:
      return "no-cost";
  }
  return "?";
}

// ---- error report ----

PredictionError relative_error(const std::vector<double>& predicted_s,
                               const std::vector<double>& measured_s,
                               const std::vector<std::string>& names) {
  if (predicted_s.size() != measured_s.size() ||
      (!names.empty() && names.size() != measured_s.size()))
    throw InvalidArgument(cat("relative_error: ", predicted_s.size(), " predictions, ",
                              measured_s.size(), " measurements and ", names.size(), " names"));
  PredictionError r;
  double sum = 0;
  for (size_t i = 0; i < measured_s.size(); ++i) {
    const double m = measured_s[i], p = predicted_s[i];
    const std::string label = names.empty() ? cat("sample ", i) : names[i];
    if (!(m > 0) || !std::isfinite(m))
      throw InvalidArgument(cat("relative_error: measured time of ", label, " is ", m));
    if (!(p >= 0) || !std::isfinite(p))
      throw InvalidArgument(cat("relative_error: predicted time of ", label, " is ", p));
    const double e = std::abs(p - m) / m;
    sum += e;
    if (r.count == 0 || e > r.max_abs_rel_error) {
      r.max_abs_rel_error = e;
      r.worst = label;
    }
    ++r.count;
  }
  if (r.count > 0) r.mean_abs_rel_error = sum / r.count;
  return r;
}

PredictionError prediction_error(const CostModel& model, const DeviceProfile& device,
                                 const std::vector<MeasuredOp>& samples) {
  std::vector<double> predicted, measured;
  std::vector<std::string> names;
  for (const auto& s : samples) {
    predicted.push_back(model.predict_op_s(s.node, device));
    measured.push_back(s.measured_s);
    names.push_back(s.node.name);
  }
  return relative_error(predicted, measured, names);
}

std::vector<MeasuredOp> table_samples(const DeviceProfile& device) {
  std::vector<MeasuredOp> out;
  for (const auto& [key, seconds] : device.op_latency_s) {
    try {
      out.push_back({node_from_op_key(key), seconds});
    } catch (const Error& e) {
      log().debug("table_samples: entry '{}' of '{}' skipped: {}", key, device.name, e.what());
    }
  }
  return out;
}

}  // namespace tandem
