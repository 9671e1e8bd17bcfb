// SPDX-License-Identifier: Apache-2.0
// Reading and writing pipeline plans (plan.h) through the core JSON field reader.
#include "tandem/sched/plan.h"

#include <set>

#include "core/json_reader.h"
#include "tandem/core/error.h"

namespace tandem::sched {
namespace {

using detail::JsonField;

constexpr int64_t kMaxSlice = int64_t{1} << 32;
constexpr int64_t kMaxPromptLen = int64_t{1} << 40;
constexpr int64_t kMaxMicroBatches = int64_t{1} << 20;
constexpr size_t kMaxStages = 4096;
constexpr size_t kMaxGroup = 4096;

int64_t bounded(const JsonField& f, int64_t hi) {
  const int64_t v = f.positive_integer();
  if (v > hi) f.fail(cat("expected at most ", hi, ", got ", f.shown()));
  return v;
}

DeviceShare read_share(const JsonField& f) {
  f.expect_object({"device", "share"});
  DeviceShare d{f.at("device").non_empty_string(), nlohmann::json::object()};
  if (f.has("share")) {
    const JsonField share = f.at("share");
    if (!share.value().is_object()) share.fail(cat("expected an object, got ", share.shown()));
    d.share = share.value();
  }
  return d;
}

PlanStage read_stage(const JsonField& f) {
  f.expect_object({"device", "devices", "stage"});
  PlanStage s;
  if (f.has("device") == f.has("devices"))
    f.fail("expected either \"device\" (one device) or \"devices\" (a group)");
  if (f.has("device")) {
    s.devices.push_back({f.at("device").non_empty_string(), nlohmann::json::object()});
  } else {
    const JsonField group = f.at("devices");
    const size_t n = group.array_size();
    if (n == 0 || n > kMaxGroup) group.fail(cat("expected 1 to ", kMaxGroup, " devices"));
    std::set<std::string> seen;
    for (size_t i = 0; i < n; ++i) {
      s.devices.push_back(read_share(group[i]));
      if (!seen.insert(s.devices.back().device).second)
        group[i].at("device").fail(cat("device '", s.devices.back().device, "' is repeated"));
    }
  }
  const JsonField config = f.at("stage");
  if (!config.value().is_object()) config.fail(cat("expected an object, got ", config.shown()));
  config.at("kind").non_empty_string();
  s.stage = config.value();
  return s;
}

}  // namespace

const std::string& PlanStage::device() const {
  if (devices.empty()) throw InvalidArgument("plan stage: no device");
  return devices.front().device;
}

std::string PlanStage::kind() const {
  return stage.is_object() && stage.contains("kind") && stage["kind"].is_string()
             ? stage["kind"].get<std::string>()
             : std::string();
}

nlohmann::json PlanPrediction::to_json() const {
  nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
  j["latency_s"] = latency_s;
  if (period_s > 0) j["period_s"] = period_s;
  j["throughput_per_s"] = throughput_per_s;
  if (!unit.empty()) j["unit"] = unit;
  j["per_stage_busy_s"] = per_stage_busy_s;
  if (energy_j > 0) j["energy_j"] = energy_j;
  j["source"] = source;
  return j;
}

PlanPrediction PlanPrediction::from_json(const nlohmann::json& j, const std::string& where) {
  const JsonField f(j, where, "predicted");
  if (!j.is_object()) f.fail(cat("expected an object, got ", f.shown()));
  PlanPrediction p;
  for (const auto& [key, v] : f.members()) {
    if (key == "latency_s")
      p.latency_s = v.non_negative_number();
    else if (key == "period_s")
      p.period_s = v.non_negative_number();
    else if (key == "throughput_per_s")
      p.throughput_per_s = v.non_negative_number();
    else if (key == "unit")
      p.unit = v.string();
    else if (key == "energy_j")
      p.energy_j = v.non_negative_number();
    else if (key == "source")
      p.source = v.string();
    else if (key == "per_stage_busy_s") {
      for (size_t i = 0; i < v.array_size(); ++i)
        p.per_stage_busy_s.push_back(v[i].non_negative_number());
    } else {
      p.extra[key] = v.value();
    }
  }
  return p;
}

std::vector<std::string> PipelinePlan::devices() const {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& s : stages)
    for (const auto& d : s.devices)
      if (seen.insert(d.device).second) out.push_back(d.device);
  return out;
}

nlohmann::json PipelinePlan::to_json() const {
  nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
  j["version"] = version;
  j["system"] = system;
  j["cluster"] = cluster;
  if (prompt_len > 0) j["prompt_len"] = prompt_len;  // 0: not stated
  j["micro_batches"] = micro_batches;
  if (batch > 0) j["batch"] = batch;
  if (!slices.empty()) j["slices"] = slices;
  j["stages"] = nlohmann::json::array();
  for (const auto& s : stages) {
    nlohmann::json js;
    if (s.devices.size() == 1 && s.devices[0].share.empty()) {
      js["device"] = s.devices[0].device;
    } else {
      js["devices"] = nlohmann::json::array();
      for (const auto& d : s.devices)
        js["devices"].push_back({{"device", d.device}, {"share", d.share}});
    }
    js["stage"] = s.stage;
    j["stages"].push_back(std::move(js));
  }
  j["predicted"] = predicted.to_json();
  return j;
}

PipelinePlan PipelinePlan::from_json(const nlohmann::json& j, const std::string& where) {
  const JsonField f(j, where, "");
  if (!j.is_object()) f.fail(cat("expected a JSON object, got ", f.shown()));
  PipelinePlan p;
  static const std::set<std::string> known = {"version",    "system",        "cluster",
                                              "prompt_len", "micro_batches", "batch",
                                              "slices",     "stages",        "predicted"};
  for (const auto& [k, v] : j.items())
    if (!known.count(k)) p.extra[k] = v;
  const JsonField version = f.at("version");
  p.version = static_cast<int>(version.integer());
  if (version.integer() != 1)
    version.fail(cat("plan version ", version.shown(), " (this build reads version 1)"));
  if (f.has("system")) p.system = f.at("system").string();
  if (f.has("cluster")) p.cluster = f.at("cluster").string();
  if (f.has("prompt_len")) p.prompt_len = bounded(f.at("prompt_len"), kMaxPromptLen);
  if (f.has("micro_batches")) p.micro_batches = bounded(f.at("micro_batches"), kMaxMicroBatches);
  if (f.has("batch")) p.batch = bounded(f.at("batch"), kMaxPromptLen);
  if (f.has("slices")) {
    const JsonField sl = f.at("slices");
    int64_t sum = 0;
    for (size_t i = 0; i < sl.array_size(); ++i) {
      p.slices.push_back(bounded(sl[i], kMaxSlice));
      sum += p.slices.back();
    }
    if (p.prompt_len > 0 && !p.slices.empty() && sum != p.prompt_len)
      sl.fail(cat("sum ", sum, " != prompt_len ", p.prompt_len));
  }
  const JsonField st = f.at("stages");
  const size_t n = st.array_size();
  if (n == 0 || n > kMaxStages) st.fail(cat("expected 1 to ", kMaxStages, " stages"));
  for (size_t i = 0; i < n; ++i) p.stages.push_back(read_stage(st[i]));
  if (f.has("predicted")) p.predicted = PlanPrediction::from_json(j["predicted"], where);
  return p;
}

PipelinePlan PipelinePlan::from_json_file(const std::string& path) {
  return from_json(detail::read_json_file(path), path);
}

void PipelinePlan::save(const std::string& path) const {
  detail::write_text_file(path, to_json().dump(2) + "\n");
}

}  // namespace tandem::sched
