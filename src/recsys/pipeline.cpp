// SPDX-License-Identifier: Apache-2.0
// PipelinePolicy (pipeline.h): stages chained through RequestMeta::on_done, stage queries cut
// from the schema request, top-k between stages.
#include "tandem/recsys/pipeline.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/error.h"

namespace tandem::rec {

namespace {

void check_tables(const std::vector<TableConfig>& schema, const std::vector<TableConfig>& stage,
                  const std::string& model, const char* what) {
  if (stage.size() > schema.size())
    throw InvalidArgument(cat("pipeline: model '", model, "' has ", stage.size(), " ", what,
                              " tables, the schema only ", schema.size()));
  for (size_t t = 0; t < stage.size(); ++t) {
    const TableConfig &a = schema[t], &b = stage[t];
    if (a.rows != b.rows || a.dim != b.dim || a.pooling != b.pooling || a.hash != b.hash)
      throw InvalidArgument(cat("pipeline: model '", model, "' table ", b.name, " (rows ", b.rows,
                                ", dim ", b.dim, ", pooling ", b.pooling, ", hash ", b.hash,
                                ") differs from the schema's ", a.name, " (rows ", a.rows, ", dim ",
                                a.dim, ", pooling ", a.pooling, ", hash ", a.hash, ")"));
  }
}

}  // namespace

void check_stage_schema(const ModelConfig& schema, const ModelConfig& stage) {
  if (stage.dense_features > schema.dense_features)
    throw InvalidArgument(cat("pipeline: model '", stage.name, "' reads ", stage.dense_features,
                              " dense features, the schema has ", schema.dense_features));
  check_tables(schema.tables, stage.tables, stage.name, "pooled");
  check_tables(schema.item_tables, stage.item_tables, stage.name, "item");
  if (stage.seq_len > schema.seq_len)
    throw InvalidArgument(cat("pipeline: model '", stage.name, "' reads ", stage.seq_len,
                              " behaviours, the schema has ", schema.seq_len));
}

QueryInputs stage_query(const ModelConfig& schema, const QueryInputs& req,
                        const std::vector<int64_t>& rows, const ModelConfig& stage) {
  QueryInputs q;
  q.rows = static_cast<int64_t>(rows.size());
  const int64_t df = stage.dense_features, sdf = schema.dense_features;
  for (int64_t r : rows) {
    if (r < 0 || r >= req.rows)
      throw InvalidArgument(cat("stage_query: row ", r, " outside [0, ", req.rows, ")"));
    q.dense.insert(q.dense.end(), req.dense.begin() + r * sdf, req.dense.begin() + r * sdf + df);
  }
  for (size_t t = 0; t < stage.tables.size(); ++t) {
    std::vector<int64_t> ids, offsets{0};
    for (int64_t r : rows) {
      const auto& off = req.offsets[t];
      ids.insert(ids.end(), req.ids[t].begin() + off[r], req.ids[t].begin() + off[r + 1]);
      offsets.push_back(static_cast<int64_t>(ids.size()));
    }
    q.ids.push_back(std::move(ids));
    q.offsets.push_back(std::move(offsets));
  }
  const int64_t L = stage.seq_len, SL = schema.seq_len;
  for (size_t k = 0; k < stage.item_tables.size(); ++k) {
    std::vector<int64_t> items, seq;
    for (int64_t r : rows) {
      items.push_back(req.item_ids[k][r]);
      const auto first = req.seq_ids[k].begin() + (r + 1) * SL - L;  // the last L behaviours
      seq.insert(seq.end(), first, first + L);
    }
    q.item_ids.push_back(std::move(items));
    q.seq_ids.push_back(std::move(seq));
  }
  return q;
}

std::vector<int64_t> top_k(const std::vector<float>& scores, int64_t k) {
  std::vector<int64_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), int64_t{0});
  const size_t n = std::min(idx.size(), static_cast<size_t>(std::max<int64_t>(0, k)));
  std::partial_sort(
      idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(),
      [&](int64_t a, int64_t b) { return scores[a] != scores[b] ? scores[a] > scores[b] : a < b; });
  idx.resize(n);
  return idx;
}

// One request on its way through the stages.
struct PipelinePolicy::Flow {
  int64_t id = 0;
  std::shared_ptr<const QueryInputs> request;
  RequestMeta meta;  // the request's (priority, SLA); its on_done is called by finish()
  Clock::time_point arrival;
  double sla_ms = 0;
  size_t stage = 0;
  std::vector<int64_t> rows;  // schema rows the current stage scores
  double queue_s = 0, service_s = 0;
  std::promise<Response> promise;
};

PipelinePolicy::PipelinePolicy(std::vector<PipelineStage> stages, ModelConfig schema,
                               Executor& executor, const PolicyOptions& policy,
                               PipelineOptions options)
    : stages_(std::move(stages)),
      schema_(std::move(schema)),
      ex_(executor),
      opt_(std::move(options)) {
  if (stages_.empty()) throw InvalidArgument("pipeline: no stages");
  if (!(opt_.sla_ms > 0)) throw InvalidArgument(cat("pipeline: sla_ms ", opt_.sla_ms, " <= 0"));
  for (const auto& s : stages_) {
    if (!s.model) throw InvalidArgument(cat("pipeline: stage '", s.name, "' has no model"));
    if (s.keep < 1)
      throw InvalidArgument(cat("pipeline: stage '", s.name, "' keeps ", s.keep, " rows (< 1)"));
    check_stage_schema(schema_, s.model->config());
  }
  for (const auto& s : stages_)
    policies_.push_back(make_policy(*s.model, ex_, s.policy ? *s.policy : policy));
  records_.resize(stages_.size());
}

PipelinePolicy::~PipelinePolicy() {
  {
    std::unique_lock lk(mu_);
    idle_.wait(lk, [&] { return in_flight_ == 0; });
  }
  for (auto& p : policies_) p.reset();  // in stage order: a stage may still feed the next
}

std::string PipelinePolicy::name() const {
  std::string s;
  for (const auto& st : stages_) s += (s.empty() ? "" : ">") + st.name;
  std::string policy = policies_.front()->name();
  for (const auto& p : policies_)
    if (p->name() != policy) policy = "per stage";
  return cat("pipeline(", s, ") ", policy);
}

std::future<Response> PipelinePolicy::submit(std::shared_ptr<const QueryInputs> request,
                                             const RequestMeta& meta) {
  if (!request) throw InvalidArgument("pipeline: null request");
  validate_query(schema_, *request);  // the shapes stage_query indexes
  if (meta.priority < 1 || !(meta.sla_ms >= 0))
    throw InvalidArgument(
        cat("pipeline: priority ", meta.priority, " < 1 or sla_ms ", meta.sla_ms, " < 0"));
  auto flow = std::make_shared<Flow>();
  flow->request = std::move(request);
  flow->meta = meta;
  flow->arrival = ex_.now();
  flow->sla_ms = meta.sla_ms > 0 ? meta.sla_ms : opt_.sla_ms;
  flow->rows.resize(static_cast<size_t>(flow->request->rows));
  std::iota(flow->rows.begin(), flow->rows.end(), int64_t{0});
  auto fut = flow->promise.get_future();
  {
    std::lock_guard lk(mu_);
    flow->id = next_id_++;
    ++in_flight_;
  }
  try {
    launch(flow);
  } catch (...) {
    std::lock_guard lk(mu_);
    --in_flight_;
    idle_.notify_all();
    throw;
  }
  return fut;
}

void PipelinePolicy::launch(const std::shared_ptr<Flow>& flow) {
  const PipelineStage& st = stages_[flow->stage];
  auto q = std::make_shared<const QueryInputs>(
      stage_query(schema_, *flow->request, flow->rows, st.model->config()));
  RequestMeta m = flow->meta;
  m.on_done = nullptr;
  // The SLA time left; a request already late still goes on, with the tightest deadline.
  const double used_ms = 1e3 * std::chrono::duration<double>(ex_.now() - flow->arrival).count();
  m.sla_ms = std::max(1e-3, flow->sla_ms - used_ms);
  m.on_done = [this, flow](const Response* r, std::exception_ptr error) {
    on_stage_done(flow, r, error);
  };
  policies_[flow->stage]->submit(std::move(q), m);
}

void PipelinePolicy::on_stage_done(const std::shared_ptr<Flow>& flow, const Response* done,
                                   std::exception_ptr error) {
  if (error) return finish(*flow, nullptr, error);
  try {
    const Response& r = *done;
    const size_t s = flow->stage;
    const std::vector<int64_t> kept = top_k(r.scores, stages_[s].keep);
    std::vector<int64_t> rows;
    std::vector<float> scores;
    for (int64_t i : kept) {
      rows.push_back(flow->rows[static_cast<size_t>(i)]);
      scores.push_back(r.scores[static_cast<size_t>(i)]);
    }
    flow->queue_s += r.queue_s;
    flow->service_s += r.service_s;
    {
      std::lock_guard lk(mu_);
      StageRecord& rec = records_[s];
      rec.latency_s.push_back(r.latency_s);
      rec.queue_s.push_back(r.queue_s);
      rec.service_s.push_back(r.service_s);
      rec.rows += double(r.scores.size());
    }
    if (opt_.on_stage) opt_.on_stage(flow->id, s, rows, scores);
    flow->rows = std::move(rows);
    if (s + 1 < stages_.size()) {
      ++flow->stage;
      launch(flow);
      return;
    }
    Response out;
    out.id = flow->id;
    out.scores = std::move(scores);
    out.rows = flow->rows;
    out.queue_s = flow->queue_s;
    out.service_s = flow->service_s;
    out.latency_s = std::chrono::duration<double>(ex_.now() - flow->arrival).count();
    out.batch_rows = flow->request->rows;
    finish(*flow, &out, nullptr);
  } catch (...) {
    finish(*flow, nullptr, std::current_exception());
  }
}

void PipelinePolicy::finish(Flow& flow, Response* out, std::exception_ptr error) {
  // The caller's completion first, then the future (RequestMeta::on_done's contract).
  if (flow.meta.on_done) flow.meta.on_done(out, error);
  if (error) {
    flow.promise.set_exception(error);
  } else {
    flow.promise.set_value(std::move(*out));
  }
  std::lock_guard lk(mu_);
  --in_flight_;
  idle_.notify_all();
}

nlohmann::json PipelinePolicy::stats() const {
  std::vector<StageRecord> records;
  {
    std::lock_guard lk(mu_);
    records = records_;
  }
  // The stage policies' own stats outside mu_: a stage may hold its lock while it calls back.
  nlohmann::json stages = nlohmann::json::array();
  auto pct = [](const std::vector<double>& v) {
    const Percentiles p = percentiles_ms(v);
    return nlohmann::json{
        {"mean", p.mean}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max}};
  };
  for (size_t s = 0; s < stages_.size(); ++s) {
    const StageRecord& r = records[s];
    const double n = double(r.latency_s.size());
    stages.push_back({{"name", stages_[s].name},
                      {"model", stages_[s].model->config().name},
                      {"kind", to_string(stages_[s].model->config().kind)},
                      {"keep", stages_[s].keep},
                      {"policy", policies_[s]->name()},
                      {"completed", r.latency_s.size()},
                      {"rows", n > 0 ? r.rows / n : 0.0},
                      {"latency_ms", pct(r.latency_s)},
                      {"queue_ms", pct(r.queue_s)},
                      {"service_ms", pct(r.service_s)},
                      {"scheduler", policies_[s]->stats()}});
  }
  return {{"stages", stages}};
}

}  // namespace tandem::rec
