// SPDX-License-Identifier: Apache-2.0
// HPipe's stages in the one plan type (hpipe.h): the "llm.layers" stage config, reading the layer
// stages of a plan back with their invariants, and the plans `pipeline run` derives.
#include <filesystem>

#include "core/json_reader.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/model.h"

namespace tandem::llm::hpipe {
namespace {

using detail::JsonField;

int layer_index(const JsonField& f) {
  const int64_t v = f.non_negative_integer();
  if (v > (1 << 30)) f.fail(cat("expected at most 2^30, got ", f.shown()));
  return static_cast<int>(v);
}

StagePlan read_layer_stage(const JsonField& stage, const sched::PlanStage& s, size_t i, size_t n) {
  if (s.is_group()) stage.fail("HPipe plans run each stage on one device");
  const JsonField cfg = stage.at("stage");
  if (cfg.at("kind").string() != "llm.layers")
    cfg.at("kind").fail("HPipe plans hold 'llm.layers' stages");
  StagePlan p{s.device(), layer_index(cfg.at("first_layer")), layer_index(cfg.at("last_layer")),
              cfg.at("embed").boolean(), cfg.at("head").boolean()};
  if (p.last_layer <= p.first_layer)
    cfg.fail(cat("empty layer range [", p.first_layer, ", ", p.last_layer, ")"));
  if (p.embed != (i == 0) || p.head != (i + 1 == n))
    cfg.fail("embed must be set on the first stage only, head on the last");
  return p;
}

}  // namespace

std::vector<int> LayerStages::cuts() const {
  std::vector<int> c;
  for (const StagePlan& s : stages) c.push_back(s.first_layer);
  if (!stages.empty()) c.push_back(stages.back().last_layer);
  return c;
}

LayerStages layer_stages(const sched::PipelinePlan& plan, const std::string& where) {
  const nlohmann::json j = plan.to_json();
  const JsonField f(j, where, "");
  if (plan.slices.empty()) f.fail("'slices' missing");
  int64_t sum = 0;
  for (int64_t s : plan.slices) sum += s;
  if (sum != plan.prompt_len)
    f.at("slices").fail(cat("sum ", sum, " != prompt_len ", plan.prompt_len));
  const int64_t batch = plan.batch > 0 ? plan.batch : plan.micro_batches;
  if (batch > kMaxBatch) f.fail(cat("batch: ", batch, " requests exceed the limit of ", kMaxBatch));
  if (batch % plan.micro_batches != 0)
    f.fail(cat("batch ", batch, " is not a multiple of micro_batches ", plan.micro_batches));
  LayerStages out;
  const JsonField st = f.at("stages");
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const JsonField cfg = st[i].at("stage");
    const std::string model = cfg.at("model").string(), sha = cfg.at("sha256").string();
    if (i == 0) {
      out.model_path = model;
      out.sha256 = sha;
    } else if (model != out.model_path || sha != out.sha256) {
      cfg.fail("model differs from stage 0's");
    }
    out.stages.push_back(read_layer_stage(st[i], plan.stages[i], i, plan.stages.size()));
    if (i > 0 && out.stages[i].first_layer != out.stages[i - 1].last_layer)
      cfg.at("first_layer")
          .fail(cat(out.stages[i].first_layer, " does not continue stage ", i - 1,
                    " (which ends at ", out.stages[i - 1].last_layer, ")"));
  }
  if (out.stages.front().first_layer != 0) st[0].fail("must start at layer 0");
  if (plan.extra.contains("cuts") && plan.extra["cuts"] != nlohmann::json(out.cuts()))
    f.at("cuts").fail(cat(f.at("cuts").shown(), " differ from the stages' layer ranges ",
                          nlohmann::json(out.cuts()).dump()));
  return out;
}

nlohmann::json layer_stage_config(const std::string& model_path, const std::string& sha256,
                                  const StagePlan& s) {
  return {{"kind", "llm.layers"},
          {"model", model_path},
          {"sha256", sha256},
          {"first_layer", s.first_layer},
          {"last_layer", s.last_layer},
          {"embed", s.embed},
          {"head", s.head}};
}

sched::PipelinePlan layer_plan(const std::string& model_path, const std::string& sha256,
                               const std::vector<StagePlan>& stages) {
  sched::PipelinePlan plan;
  for (const StagePlan& s : stages)
    plan.stages.emplace_back(s.device, layer_stage_config(model_path, sha256, s));
  plan.extra["cuts"] = LayerStages{model_path, sha256, stages}.cuts();
  plan.predicted.unit = "tokens";
  return plan;
}

sched::PipelinePlan layer_plan_for_run(const sched::PipelinePlan& plan, const std::string& where) {
  // What the runtime lets a plan leave out: slices (one of prompt_len tokens), prompt_len (the
  // slices' sum), a stage's sha256 (not checked).
  sched::PipelinePlan p = plan;
  if (p.prompt_len <= 0)
    for (int64_t s : p.slices) p.prompt_len += s;
  if (p.slices.empty() && p.prompt_len > 0) p.slices = {p.prompt_len};
  for (auto& s : p.stages)
    if (s.stage.is_object() && !s.stage.contains("sha256")) s.stage["sha256"] = "";
  const LayerStages ls = layer_stages(p, where);
  // The model is read here when it is here: a coordinator may not hold the workers' files (each
  // worker's stage then checks that its head ends at the last layer).
  std::error_code ec;
  if (!std::filesystem::exists(ls.model_path, ec)) return p;
  const int n = ModelConfig::from_gguf(GgufFile(ls.model_path)).n_layers;
  const int end = ls.stages.back().last_layer;
  if (end != n) {
    throw ParseError(
        where, -1,
        cat("stages[", ls.stages.size() - 1, "].stage.last_layer: the stages end at layer ", end,
            " but '", ls.model_path, "' has ", n, " layers (each must run exactly once)"));
  }
  return p;
}

sched::PipelinePlan single_device_plan(const sched::PipelinePlan& plan) {
  const LayerStages ls = layer_stages(plan, "single-device reference");
  sched::PipelinePlan one = plan;
  one.stages.clear();
  one.stages.emplace_back(
      ls.stages.front().device,
      layer_stage_config(ls.model_path, ls.sha256,
                         {ls.stages.front().device, 0, ls.stages.back().last_layer, true, true}));
  one.extra.erase("cuts");
  return one;
}

}  // namespace tandem::llm::hpipe
