// SPDX-License-Identifier: Apache-2.0
// PipelinePlan <-> JSON in the pipeline plan contract shared with the runtime (hpipe.h).
#include <cmath>
#include <filesystem>

#include "core/json_reader.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/model.h"

namespace tandem::llm::hpipe {
namespace {

// ParseError from "source: what" (the source is everything before the first ": ").
ParseError parse_error(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos) return ParseError(message, -1, "malformed");
  return ParseError(message.substr(0, colon), -1, message.substr(colon + 2));
}

const nlohmann::json& field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw parse_error(cat(where, ": '", key, "' missing"));
  return j[key];
}

int int_field(const nlohmann::json& j, const char* key, const std::string& where, int lo) {
  const nlohmann::json& v = field(j, key, where);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > (1 << 30)) {
    throw parse_error(
        cat(where, ".", key, ": expected an integer in [", lo, ", 2^30], got ", v.dump()));
  }
  return v.get<int>();
}

std::string str_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, where);
  if (!v.is_string()) throw parse_error(cat(where, ".", key, ": expected a string"));
  return v.get<std::string>();
}

bool bool_field(const nlohmann::json& j, const char* key, const std::string& where) {
  const nlohmann::json& v = field(j, key, where);
  if (!v.is_boolean()) throw parse_error(cat(where, ".", key, ": expected true or false"));
  return v.get<bool>();
}

}  // namespace

nlohmann::json PipelinePlan::to_json() const {
  nlohmann::json st = nlohmann::json::array();
  for (const StagePlan& s : stages) {
    st.push_back({{"device", s.device},
                  {"stage",
                   {{"kind", "llm.layers"},
                    {"model", model_path},
                    {"sha256", sha256},
                    {"first_layer", s.first_layer},
                    {"last_layer", s.last_layer},
                    {"embed", s.embed},
                    {"head", s.head}}}});
  }
  return {{"version", 1},
          {"system", system},
          {"cluster", cluster},
          {"prompt_len", prompt_len},
          {"micro_batches", micro_batches},
          {"batch", batch},
          {"slices", slices},
          {"cuts", cuts()},
          {"stages", st},
          {"predicted",
           {{"latency_s", predicted.latency_s},
            {"throughput_tokens_per_s", predicted.throughput_tokens_per_s},
            {"per_stage_busy_s", predicted.per_stage_busy_s},
            {"energy_j", predicted.energy_j},
            {"source", predicted.source}}}};
}

PipelinePlan PipelinePlan::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw parse_error(cat(where, ": expected a JSON object"));
  if (int_field(j, "version", where, 0) != 1) {
    throw parse_error(cat(where, ".version: only version 1 is understood"));
  }
  PipelinePlan p;
  p.system = str_field(j, "system", where);
  p.cluster = str_field(j, "cluster", where);
  p.prompt_len = int_field(j, "prompt_len", where, 1);
  p.micro_batches = int_field(j, "micro_batches", where, 1);
  p.batch = j.contains("batch") ? int_field(j, "batch", where, 1) : p.micro_batches;
  if (p.batch > kMaxBatch)
    throw parse_error(cat(where, ".batch: ", p.batch, " requests exceed the limit of ", kMaxBatch));
  if (p.batch % p.micro_batches != 0) {
    throw parse_error(
        cat(where, ": batch ", p.batch, " is not a multiple of micro_batches ", p.micro_batches));
  }
  const nlohmann::json& sl = field(j, "slices", where);
  if (!sl.is_array() || sl.empty())
    throw parse_error(cat(where, ".slices: expected a non-empty array"));
  int64_t sum = 0;
  for (size_t i = 0; i < sl.size(); ++i) {
    if (!sl[i].is_number_integer() || sl[i].get<int64_t>() < 1 ||
        sl[i].get<int64_t>() > (1 << 30)) {
      throw parse_error(cat(where, ".slices[", i, "]: expected a positive integer"));
    }
    p.slices.push_back(sl[i].get<int>());
    sum += p.slices.back();
  }
  if (sum != p.prompt_len) {
    throw parse_error(cat(where, ".slices: sum ", sum, " != prompt_len ", p.prompt_len));
  }
  const nlohmann::json& st = field(j, "stages", where);
  if (!st.is_array() || st.empty())
    throw parse_error(cat(where, ".stages: expected a non-empty array"));
  for (size_t i = 0; i < st.size(); ++i) {
    const std::string w = cat(where, ".stages[", i, "]");
    StagePlan s;
    s.device = str_field(st[i], "device", w);
    const nlohmann::json& cfg = field(st[i], "stage", w);
    const std::string wc = w + ".stage";
    if (str_field(cfg, "kind", wc) != "llm.layers") {
      throw parse_error(cat(wc, ".kind: HPipe plans hold 'llm.layers' stages"));
    }
    const std::string model = str_field(cfg, "model", wc), sha = str_field(cfg, "sha256", wc);
    if (i == 0) {
      p.model_path = model;
      p.sha256 = sha;
    } else if (model != p.model_path || sha != p.sha256) {
      throw parse_error(cat(wc, ": model differs from stage 0's"));
    }
    s.first_layer = int_field(cfg, "first_layer", wc, 0);
    s.last_layer = int_field(cfg, "last_layer", wc, 0);
    s.embed = bool_field(cfg, "embed", wc);
    s.head = bool_field(cfg, "head", wc);
    if (s.last_layer <= s.first_layer) {
      throw parse_error(cat(wc, ": empty layer range [", s.first_layer, ", ", s.last_layer, ")"));
    }
    if (i > 0 && s.first_layer != p.stages.back().last_layer) {
      throw parse_error(cat(wc, ".first_layer: ", s.first_layer, " does not continue stage ", i - 1,
                            " (which ends at ", p.stages.back().last_layer, ")"));
    }
    if (s.embed != (i == 0) || s.head != (i + 1 == st.size())) {
      throw parse_error(cat(wc, ": embed must be set on the first stage only, head on the last"));
    }
    p.stages.push_back(s);
  }
  if (p.stages.front().first_layer != 0)
    throw parse_error(cat(where, ".stages[0]: must start at layer 0"));
  if (j.contains("cuts") && j["cuts"] != nlohmann::json(p.cuts())) {
    throw parse_error(cat(where, ".cuts: ", j["cuts"].dump(),
                          " differ from the stages' layer ranges ",
                          nlohmann::json(p.cuts()).dump()));
  }
  if (j.contains("predicted")) {
    const nlohmann::json& pr = j["predicted"];
    if (!pr.is_object()) throw parse_error(cat(where, ".predicted: expected an object"));
    auto num = [&](const char* k) {
      if (!pr.contains(k)) return 0.0;
      if (!pr[k].is_number() || !std::isfinite(pr[k].get<double>())) {
        throw parse_error(cat(where, ".predicted.", k, ": expected a number"));
      }
      return pr[k].get<double>();
    };
    p.predicted.latency_s = num("latency_s");
    p.predicted.throughput_tokens_per_s = num("throughput_tokens_per_s");
    p.predicted.energy_j = num("energy_j");
    if (pr.contains("per_stage_busy_s") && pr["per_stage_busy_s"].is_array()) {
      for (const auto& v : pr["per_stage_busy_s"]) {
        if (!v.is_number()) throw parse_error(cat(where, ".predicted.per_stage_busy_s: numbers"));
        p.predicted.per_stage_busy_s.push_back(v.get<double>());
      }
    }
    if (pr.contains("source") && pr["source"].is_string()) p.predicted.source = pr["source"];
  }
  return p;
}

PipelinePlan layer_plan_for_run(const sched::PipelinePlan& plan, const std::string& where) {
  // What the runtime lets a plan leave out: slices (one of prompt_len tokens), prompt_len (the
  // slices' sum), a stage's sha256 (not checked).
  nlohmann::json j = plan.to_json();
  if (plan.prompt_len <= 0 && !plan.slices.empty()) {
    int64_t sum = 0;
    for (int64_t s : plan.slices) sum += s;
    j["prompt_len"] = sum;
  }
  if (plan.slices.empty() && plan.prompt_len > 0) j["slices"] = {plan.prompt_len};
  for (auto& s : j["stages"])
    if (s["stage"].is_object() && !s["stage"].contains("sha256")) s["stage"]["sha256"] = "";
  PipelinePlan p = PipelinePlan::from_json(j, where);
  // The model is read here when it is here: a coordinator may not hold the workers' files (each
  // worker's stage then checks that its head ends at the last layer).
  std::error_code ec;
  if (!std::filesystem::exists(p.model_path, ec)) return p;
  const int n = ModelConfig::from_gguf(GgufFile(p.model_path)).n_layers;
  const int end = p.stages.back().last_layer;
  if (end != n) {
    throw parse_error(cat(where, ".stages[", p.stages.size() - 1,
                          "].stage.last_layer: the stages end at layer ", end, " but '",
                          p.model_path, "' has ", n, " layers (each must run exactly once)"));
  }
  return p;
}

sched::PipelinePlan single_device_plan(const PipelinePlan& plan) {
  PipelinePlan one = plan;
  one.stages = {
      StagePlan{plan.stages.front().device, 0, plan.stages.back().last_layer, true, true}};
  return sched::PipelinePlan::from_json(one.to_json(), "single-device reference");
}

PipelinePlan PipelinePlan::load(const std::string& path) {
  return from_json(detail::read_json_file(path), path);
}

void PipelinePlan::save(const std::string& path) const {
  detail::write_text_file(path, to_json().dump(2) + "\n");
}

}  // namespace tandem::llm::hpipe
