// SPDX-License-Identifier: Apache-2.0
// Reading and writing pipeline plans (plan.h).
#include "tandem/sched/plan.h"

#include "tandem/core/error.h"
#include "tandem/core/json.h"

namespace tandem::sched {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& path, const std::string& what) {
  throw ParseError(where, -1, path + ": " + what);
}

}  // namespace

nlohmann::json PipelinePlan::to_json() const {
  nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
  j["version"] = version;
  j["system"] = system;
  j["cluster"] = cluster;
  if (prompt_len > 0) j["prompt_len"] = prompt_len;  // 0: not stated
  j["micro_batches"] = micro_batches;
  j["slices"] = slices;
  j["stages"] = nlohmann::json::array();
  for (const auto& s : stages) j["stages"].push_back({{"device", s.device}, {"stage", s.stage}});
  j["predicted"] = predicted;
  return j;
}

PipelinePlan PipelinePlan::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) bad(where, "$", "expected a JSON object");
  PipelinePlan p;
  for (const auto& [k, v] : j.items())
    if (k != "version" && k != "system" && k != "cluster" && k != "prompt_len" &&
        k != "micro_batches" && k != "slices" && k != "stages" && k != "predicted")
      p.extra[k] = v;
  if (!j.contains("version") || !j["version"].is_number_integer())
    bad(where, "version", "missing or not an integer");
  p.version = j["version"].get<int>();
  if (p.version != 1)
    bad(where, "version", "plan version " + std::to_string(p.version) + " (this build reads 1)");
  auto str = [&](const char* key, std::string& out) {
    if (!j.contains(key)) return;
    if (!j[key].is_string()) bad(where, key, "expected a string");
    out = j[key].get<std::string>();
  };
  str("system", p.system);
  str("cluster", p.cluster);
  auto integer = [&](const char* key, int64_t& out, int64_t lo) {
    if (!j.contains(key)) return;
    if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo ||
        (j[key].is_number_unsigned() && j[key].get<uint64_t>() > uint64_t{1} << 40))
      bad(where, key,
          "expected an integer in [" + std::to_string(lo) + ", 2^40], got " + j[key].dump());
    out = j[key].get<int64_t>();
  };
  integer("prompt_len", p.prompt_len, 1);
  integer("micro_batches", p.micro_batches, 1);
  if (p.micro_batches > (1 << 20)) bad(where, "micro_batches", "too large");
  if (j.contains("slices")) {
    if (!j["slices"].is_array()) bad(where, "slices", "expected an array of positive integers");
    int64_t sum = 0;
    for (size_t i = 0; i < j["slices"].size(); ++i) {
      const auto& s = j["slices"][i];
      if (!s.is_number_integer() || s.get<int64_t>() < 1 || s.get<int64_t>() > (int64_t{1} << 32))
        bad(where, "slices[" + std::to_string(i) + "]", "expected a positive integer");
      p.slices.push_back(s.get<int64_t>());
      sum += p.slices.back();
    }
    if (p.prompt_len > 0 && !p.slices.empty() && sum != p.prompt_len)
      bad(where, "slices",
          "sum " + std::to_string(sum) + " != prompt_len " + std::to_string(p.prompt_len));
  }
  if (!j.contains("stages") || !j["stages"].is_array() || j["stages"].empty())
    bad(where, "stages", "expected a non-empty array");
  for (size_t i = 0; i < j["stages"].size(); ++i) {
    const auto& s = j["stages"][i];
    const std::string at = "stages[" + std::to_string(i) + "]";
    if (!s.is_object()) bad(where, at, "expected an object");
    if (!s.contains("device") || !s["device"].is_string() || s["device"].get<std::string>().empty())
      bad(where, at + ".device", "expected a device name");
    if (!s.contains("stage") || !s["stage"].is_object() || !s["stage"].contains("kind") ||
        !s["stage"]["kind"].is_string())
      bad(where, at + ".stage", "expected an object with a string \"kind\"");
    p.stages.push_back({s["device"].get<std::string>(), s["stage"]});
  }
  if (j.contains("predicted")) {
    if (!j["predicted"].is_object()) bad(where, "predicted", "expected an object");
    p.predicted = j["predicted"];
  }
  return p;
}

PipelinePlan PipelinePlan::from_json_file(const std::string& path) {
  return from_json(read_json_file(path), path);
}

}  // namespace tandem::sched
