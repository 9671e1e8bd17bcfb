// SPDX-License-Identifier: Apache-2.0
// `tandem rec-serve --pipeline recflow` (rec_pipeline.h).
#include "rec_pipeline.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "rec_options.h"
#include "report.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/recsys/pipeline.h"
#include "tandem/recsys/recflow.h"
#include "tandem/recsys/recflow_data.h"
#include "tandem/recsys/recstream.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::cli {
namespace {

using namespace tandem::rec;

// The stage models with one row scale for all (so that they keep the schema's table sizes): all
// their tables together fit the budget.
struct Models {
  ModelConfig schema;
  std::vector<RecModel> models;
  double scale = 1;
};

Models build_models(const RecFlowStats& stats, double budget_mib) {
  Models m;
  m.schema = zoo_config(stats.schema_model);
  std::vector<ModelConfig> cfgs;
  int64_t bytes = 0;
  for (const auto& s : stats.stages) {
    cfgs.push_back(zoo_config(s.model));
    bytes += cfgs.back().table_bytes();
  }
  const double budget = budget_mib * 1048576.0;
  if (double(bytes) > budget) m.scale = budget / double(bytes);
  if (m.scale < 1) {
    m.schema.scale_rows(m.scale);
    for (auto& c : cfgs) c.scale_rows(m.scale);
  }
  for (const auto& c : cfgs) m.models.push_back(RecModel::generate(c));
  return m;
}

void print_table(const nlohmann::json& stages, const LoadStats& s, const nlohmann::json& ltp,
                 double sla_ms) {
  std::printf(
      "| stage | model | kind | rows scored (mean) | keep | p50 ms | p95 ms | p99 ms | queue "
      "mean ms | service mean ms |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& st : stages)
    std::printf("| %s | %s | %s | %.1f | %lld | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                st["name"].get<std::string>().c_str(), st["model"].get<std::string>().c_str(),
                st["kind"].get<std::string>().c_str(), st["rows"].get<double>(),
                st["keep"].get<long long>(), st["latency_ms"]["p50"].get<double>(),
                st["latency_ms"]["p95"].get<double>(), st["latency_ms"]["p99"].get<double>(),
                st["queue_ms"]["mean"].get<double>(), st["service_ms"]["mean"].get<double>());
  std::printf("| end to end | | | %.1f | | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
              s.completed ? s.mean_batch_rows : 0.0, s.latency_ms.p50, s.latency_ms.p95,
              s.latency_ms.p99, s.queue_ms.mean, s.service_ms.mean);
  std::printf("\n%s: %lld requests in %.3f s (%.1f requests/s), %lld errors", s.policy.c_str(),
              static_cast<long long>(s.completed), s.measured_s, s.throughput_qps,
              static_cast<long long>(s.errors));
  if (s.rate_qps > 0) std::printf(", %lld arrivals dropped", static_cast<long long>(s.dropped));
  if (!ltp.is_null())
    std::printf("; latency-bounded throughput %.1f requests/s (end-to-end p99 %.2f ms <= %g ms)",
                ltp["qps"].get<double>(), ltp["p99_ms_at_qps"].get<double>(), sla_ms);
  std::printf(
      "\n(per-stage figures cover every request, warm-up included; end to end only the measured "
      "ones)\n");
}

struct RequestPool {
  std::vector<std::shared_ptr<const QueryInputs>> pool;
  std::string source;  // "generated" or the file's header source
  int64_t folded = 0;  // real ids folded into smaller tables
};

// --pool requests: generated from the statistics, or the first ones of a converted RecFlow day.
RequestPool make_requests(const RecPipelineRun& r, const RecFlowStats& stats,
                          const ModelConfig& schema) {
  RequestPool p;
  if (r.requests_path.empty()) {
    RecFlowRequests gen(schema, stats, r.seed);
    for (int i = 0; i < r.pool; ++i)
      p.pool.push_back(std::make_shared<QueryInputs>(gen.make(uint64_t(i))));
    p.source = "generated from " + r.stats_path;
    return p;
  }
  const RecFlowRequestFile file = read_recflow_requests(r.requests_path);
  for (const auto& req : file.requests) {
    if (int(p.pool.size()) == r.pool) break;
    if (req.candidates.empty()) continue;
    p.pool.push_back(std::make_shared<QueryInputs>(recflow_query(req, schema, &p.folded)));
  }
  if (p.pool.empty()) throw InvalidArgument(cat(r.requests_path, ": no request with candidates"));
  p.source = cat(r.requests_path, " (", file.header.value("source", std::string("?")), ")");
  return p;
}

// Each stage's load shape: a request's candidates, then each stage's input is min(rows of the
// stage before, its keep).
std::vector<LoadShape> stage_loads(const RecPipelineRun& r,
                                   const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                                   const std::vector<PipelineStage>& stages) {
  std::vector<LoadShape> out;
  std::vector<double> rows;
  for (const auto& q : pool) rows.push_back(double(q->rows));
  for (const auto& st : stages) {
    LoadShape load{.clients = double(r.lo.clients), .rate_qps = r.lo.rate_qps};
    set_row_stats(load, rows);
    out.push_back(load);
    for (double& v : rows) v = std::min(v, double(st.keep));
  }
  return out;
}

// --recstream: each stage's configuration predicted for its model and rows under the run's load;
// returns {stage, choice, predicted p99 of every configuration} per stage.
nlohmann::json pick_stage_configs(const std::string& weights_path, const RecPipelineRun& r,
                                  const Executor& ex,
                                  const std::vector<std::shared_ptr<const QueryInputs>>& pool,
                                  std::vector<PipelineStage>& stages) {
  const RecStreamWeights w = load_recstream_weights(weights_path);
  const std::vector<LoadShape> loads = stage_loads(r, pool, stages);
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < stages.size(); ++i) {
    const RecStreamPrediction p =
        recstream_predict(w, recstream_inputs(*stages[i].model, ex, loads[i]));
    stages[i].policy = w.configs[size_t(p.best)].apply(r.po);
    nlohmann::json predicted;
    for (size_t c = 0; c < w.configs.size(); ++c) predicted[w.configs[c].name()] = p.p99_ms(int(c));
    out.push_back({{"stage", stages[i].name},
                   {"mean_rows", loads[i].mean_rows},
                   {"p95_rows", loads[i].p95_rows},
                   {"choice", w.configs[size_t(p.best)].name()},
                   {"predicted_p99_ms", predicted}});
  }
  return out;
}

}  // namespace

int run_rec_pipeline(const RecPipelineRun& r) {
  if (r.pipeline != "recflow")
    throw InvalidArgument(cat("--pipeline: unknown pipeline '", r.pipeline, "' (recflow)"));
  const bool simulated = r.device.rfind("sim:", 0) == 0;
  if (!simulated && r.device != "cpu")
    throw InvalidArgument(
        cat("--pipeline runs on cpu or a simulated device (sim:...), not --device ", r.device));
  if (r.ltp && !simulated)
    throw InvalidArgument("--ltp searches on a simulated device only (--device sim:...)");
  const RecFlowStats stats = read_recflow_stats(r.stats_path);
  const Models m = build_models(stats, r.table_budget_mib);
  std::vector<PipelineStage> stages;
  for (size_t i = 0; i < stats.stages.size(); ++i)
    stages.push_back({stats.stages[i].name, &m.models[i], stats.stages[i].keep});
  const RequestPool requests = make_requests(r, stats, m.schema);
  const auto& pool = requests.pool;

  PipelineOptions popt;
  popt.sla_ms = r.po.sla_ms;
  const SimDevice dev = simulated ? sim_device_from_flag(r.device) : SimDevice{};
  const SimOptions so = sim_options(r.device, r.seed, r.jitter, r.timing_only);
  std::unique_ptr<Executor> ex;
  if (simulated)
    ex = std::make_unique<SimExecutor>(dev, so);
  else
    ex = std::make_unique<CpuExecutor>(measured_profile(Device::cpu()));
  const nlohmann::json picks = r.recstream.empty()
                                   ? nlohmann::json()
                                   : pick_stage_configs(r.recstream, r, *ex, pool, stages);
  LoadStats s;
  nlohmann::json stage_stats;
  {
    PipelinePolicy p(stages, m.schema, *ex, r.po, popt);
    s = simulated ? run_sim_load(p, static_cast<SimExecutor&>(*ex), pool, r.lo)
                  : run_load(p, pool, r.lo);
    stage_stats = p.stats()["stages"];
  }
  nlohmann::json ltp;
  if (r.ltp)
    ltp = latency_bounded_throughput(
        [&](SimExecutor& e) {
          return std::make_unique<PipelinePolicy>(stages, m.schema, e, r.po, popt);
        },
        dev, so, r.po.sla_ms, pool, r.lo);
  if (r.output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"build", build_info_json()},
                        {"system", system_json()},
                        {"params",
                         {{"pipeline", r.pipeline},
                          {"stats", r.stats_path},
                          {"stats_source", stats.source},
                          {"requests", requests.source},
                          {"requests_pooled", pool.size()},
                          {"ids_folded", requests.folded},
                          {"dataset", stats.dataset},
                          {"policy", r.recstream.empty() ? r.po.policy : "recstream"},
                          {"recstream", r.recstream},
                          {"streams", r.po.streams},
                          {"device", r.device},
                          {"clients", r.lo.clients},
                          {"rate_qps", r.lo.rate_qps},
                          {"duration_s", r.lo.duration_s},
                          {"warmup_s", r.lo.warmup_s},
                          {"sla_ms", r.po.sla_ms},
                          {"pool", r.pool},
                          {"seed", r.seed},
                          {"rows_scale", m.scale}}},
                        {"results", {{"end_to_end", s.to_json()}, {"stages", stage_stats}}}};
    if (simulated) j["params"]["sim_device"] = dev.to_json();
    if (!ltp.is_null()) j["results"]["latency_bounded_throughput"] = ltp;
    if (!picks.is_null()) j["results"]["recstream_stage_configs"] = picks;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("RecFlow pipeline on %s, policy %s per stage, tables %.4g x the zoo's\n",
                r.device.c_str(), r.recstream.empty() ? r.po.policy.c_str() : "RecStream's",
                m.scale);
    for (const auto& pk : picks)
      std::printf("RecStream (%s) for %s (%.0f rows): %s\n", r.recstream.c_str(),
                  pk["stage"].get<std::string>().c_str(), pk["mean_rows"].get<double>(),
                  pk["choice"].get<std::string>().c_str());
    std::printf("requests: %zu, %s", pool.size(), requests.source.c_str());
    if (requests.folded)
      std::printf("; %lld ids past their (scaled) table folded modulo its rows",
                  static_cast<long long>(requests.folded));
    std::printf("\n\n");
    print_table(stage_stats, s, ltp, r.po.sla_ms);
  }
  return s.errors ? 1 : 0;
}

}  // namespace tandem::cli
