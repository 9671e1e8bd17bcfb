// SPDX-License-Identifier: Apache-2.0
// A multi-stage recommendation pipeline served as one policy: a request's candidates go through
// stages (RecFlow: retrieval -> pre-rank -> coarse -> rank -> re-rank, the recsys spec §2.9), each
// stage scoring the rows the previous stage kept and keeping its own top `keep`, under one
// end-to-end SLA.
//
// Every stage runs on an ordinary serving policy (serving.h: fcfs, stream-pool, recos, ...) over
// one shared executor; the pipeline only chains them: when a stage's query completes (its
// RequestMeta::on_done), the pipeline takes that stage's top-k (score descending, ties by row),
// builds the next stage's query from those rows and submits it with the SLA time still left. So
// RecOS and the rest apply per stage, and run_load / run_sim_load drive a pipeline like any policy.
//
// A request is a QueryInputs of the schema config (the model with every table the stages read,
// RecFlow's DIN): one row per candidate. A stage's query keeps the schema's rows it was given and,
// per row, the first dense features, the first pooled tables and the first item tables its model
// has, and the last seq_len behaviours; check_stage_schema says when a model cannot read a schema.
//
//   std::vector<tandem::rec::PipelineStage> st = {{"retrieval", &sasrec, 1000}, ..., };
//   tandem::rec::PipelinePolicy p(st, din.config(), executor, {.policy = "recos"});
//   auto stats = tandem::rec::run_sim_load(p, executor, requests, {.clients = 8});
//   nlohmann::json per_stage = p.stats();   // latency percentiles and rows per stage
//
// Thread-safety: submit() from any thread; destroy the pipeline only when no request is in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tandem/export.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

struct PipelineStage {
  std::string name;
  const RecModel* model = nullptr;
  int64_t keep = 1;  // rows passed on (the last stage: returned), at most the rows it scored
  // This stage's serving policy (e.g. the configuration RecStream picks for its model and load);
  // unset: the pipeline's.
  std::optional<PolicyOptions> policy;
};

struct PipelineOptions {
  double sla_ms = 60;  // end to end; a request's RequestMeta::sla_ms, when set, wins
  // Called after every stage of every request with the schema rows the stage kept and their scores
  // (any thread; must not throw).
  std::function<void(int64_t request, size_t stage, const std::vector<int64_t>& rows,
                     const std::vector<float>& scores)>
      on_stage;
};

// InvalidArgument naming the stage's model and what differs when `stage` cannot read queries cut
// from `schema` (its dense features, pooled tables, item tables or sequence exceed the schema's,
// or a table differs in rows, width, pooling or hashing).
TANDEM_API void check_stage_schema(const ModelConfig& schema, const ModelConfig& stage);
// The query of `stage` for the schema rows `rows` of `request` (see above).
TANDEM_API QueryInputs stage_query(const ModelConfig& schema, const QueryInputs& request,
                                   const std::vector<int64_t>& rows, const ModelConfig& stage);
// Indices of the min(k, scores.size()) highest scores, highest first, ties by lower index.
TANDEM_API std::vector<int64_t> top_k(const std::vector<float>& scores, int64_t k);

class TANDEM_API PipelinePolicy final : public ServingPolicy {
 public:
  // Builds one policy per stage with make_policy(model, executor, the stage's policy or `policy`)
  // (InvalidArgument for no stages, a null model, keep < 1, or a model that check_stage_schema
  // refuses).
  PipelinePolicy(std::vector<PipelineStage> stages, ModelConfig schema, Executor& executor,
                 const PolicyOptions& policy, PipelineOptions options = {});
  ~PipelinePolicy() override;
  std::string name() const override;
  // The response's scores are the last stage's kept scores and rows the schema rows they belong
  // to; queue_s and service_s are summed over the stages, latency_s is arrival to the last answer.
  std::future<Response> submit(std::shared_ptr<const QueryInputs> request,
                               const RequestMeta& meta) override;
  using ServingPolicy::submit;
  // Per stage, over every request answered so far (warm-up included): {name, model, policy,
  // completed, rows (mean scored), latency_ms {mean, p50, p95, p99, max}, queue_ms, service_ms,
  // scheduler (the stage policy's stats)}.
  nlohmann::json stats() const override;

 private:
  struct Flow;
  struct StageRecord {
    std::vector<double> latency_s, queue_s, service_s;
    double rows = 0;
  };
  void launch(const std::shared_ptr<Flow>& flow);
  void on_stage_done(const std::shared_ptr<Flow>& flow, const Response* r,
                     std::exception_ptr error);
  // Answers the request: `out` or `error`, the caller's on_done first.
  void finish(Flow& flow, Response* out, std::exception_ptr error);

  std::vector<PipelineStage> stages_;
  ModelConfig schema_;
  Executor& ex_;
  PipelineOptions opt_;
  std::vector<std::unique_ptr<ServingPolicy>> policies_;
  mutable std::mutex mu_;
  std::condition_variable idle_;
  int64_t in_flight_ = 0, next_id_ = 0;
  std::vector<StageRecord> records_;
};

}  // namespace tandem::rec
