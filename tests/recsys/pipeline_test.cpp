// SPDX-License-Identifier: Apache-2.0
// The RecFlow-shaped pipeline (pipeline.h, recflow.h): served results equal stage-by-stage
// sequential execution, the statistics file reader's errors, and the request generator.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "recsys_device.h"
#include "tandem/core/error.h"
#include "tandem/recsys/pipeline.h"
#include "tandem/recsys/recflow.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::rec {
namespace {

nlohmann::json stats_json() {
  std::ifstream f(TANDEM_RECFLOW_STATS);
  return nlohmann::json::parse(f);
}

// The committed funnel over the recflow-* zoo models with tables scaled 1e-4 and small requests.
struct RecFlow {
  RecFlow() : stats(parse_recflow_stats(stats_json(), "recflow-stats.json")) {
    stats.candidates_median = 40;
    stats.candidates_min = 20;
    stats.candidates_max = 60;
    const int64_t keep[] = {30, 20, 12, 5, 3};
    for (size_t i = 0; i < stats.stages.size(); ++i) stats.stages[i].keep = keep[i];
    schema = small(stats.schema_model);
    for (const auto& s : stats.stages) models.push_back(RecModel::generate(small(s.model)));
    for (size_t i = 0; i < stats.stages.size(); ++i)
      stages.push_back({stats.stages[i].name, &models[i], stats.stages[i].keep});
    RecFlowRequests gen(schema, stats, 3);
    for (uint64_t i = 0; i < 6; ++i) pool.push_back(std::make_shared<QueryInputs>(gen.make(i)));
  }
  static ModelConfig small(const std::string& name) {
    ModelConfig c = zoo_config(name);
    c.scale_rows(1e-4);
    return c;
  }
  RecFlowStats stats;
  ModelConfig schema;
  std::vector<RecModel> models;
  std::vector<PipelineStage> stages;
  std::vector<std::shared_ptr<const QueryInputs>> pool;
};

struct StageResult {
  std::vector<int64_t> rows;
  std::vector<float> scores;
};

// Every stage of every request served under load, against forward() of each stage in turn.
void check_pipeline(RecFlow& rf, Executor& ex, const PolicyOptions& po, SimExecutor* sim) {
  std::mutex mu;
  std::map<int64_t, std::vector<StageResult>> served;  // by pipeline request id
  std::map<int64_t, size_t> pool_index;
  PipelineOptions popt;
  popt.on_stage = [&](int64_t id, size_t, const std::vector<int64_t>& rows,
                      const std::vector<float>& scores) {
    std::lock_guard lk(mu);
    served[id].push_back({rows, scores});
  };
  PipelinePolicy p(rf.stages, rf.schema, ex, po, popt);
  LoadOptions lo;
  lo.clients = 3;
  lo.duration_s = sim ? 0.0015 : 0.3;
  lo.warmup_s = 0;
  lo.on_response = [&](size_t index, const Response& r) {
    std::lock_guard lk(mu);
    pool_index[r.id] = index;
    EXPECT_EQ(r.rows, served[r.id].back().rows);
    EXPECT_EQ(r.scores, served[r.id].back().scores);
  };
  const LoadStats s = sim ? run_sim_load(p, *sim, rf.pool, lo) : run_load(p, rf.pool, lo);
  EXPECT_EQ(s.errors, 0);
  ASSERT_GT(s.completed, 3);
  ASSERT_EQ(pool_index.size(), static_cast<size_t>(s.completed));
  for (const auto& [id, index] : pool_index) {
    SCOPED_TRACE(cat("request ", id, " (pool ", index, ")"));
    const QueryInputs& req = *rf.pool[index];
    std::vector<int64_t> rows(static_cast<size_t>(req.rows));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
    ASSERT_EQ(served[id].size(), rf.stages.size());
    for (size_t st = 0; st < rf.stages.size(); ++st) {
      const RecModel& m = *rf.stages[st].model;
      const std::vector<float> scores = m.forward(stage_query(rf.schema, req, rows, m.config()));
      std::vector<int64_t> kept;
      std::vector<float> kept_scores;
      for (int64_t i : top_k(scores, rf.stages[st].keep)) {
        kept.push_back(rows[static_cast<size_t>(i)]);
        kept_scores.push_back(scores[static_cast<size_t>(i)]);
      }
      EXPECT_EQ(served[id][st].rows, kept) << rf.stages[st].name;
      EXPECT_EQ(served[id][st].scores, kept_scores) << rf.stages[st].name;
      rows = kept;
    }
  }
  const nlohmann::json j = p.stats();
  ASSERT_EQ(j["stages"].size(), rf.stages.size());
  EXPECT_EQ(j["stages"][3]["model"], "recflow-din");
  EXPECT_GT(j["stages"][0]["rows"].get<double>(), j["stages"][1]["rows"].get<double>());
}

TEST(RecPipeline, ServedStagesEqualSequentialExecutionOnSimGpu) {
  RecFlow rf;
  for (const char* policy : {"recos", "fcfs"}) {
    SCOPED_TRACE(policy);
    SimExecutor sim(sim_device("h100"), {.seed = 2});
    check_pipeline(rf, sim, {.policy = policy, .streams = 2}, &sim);
  }
}

// A stage's own policy (rec-serve --pipeline --recstream: RecStream's pick per stage) is the one
// it runs, and the results are still those of sequential execution.
TEST(RecPipeline, StagesRunTheirOwnPolicies) {
  RecFlow rf;
  const PolicyOptions per_stage[] = {{.policy = "recos", .streams = 4},
                                     {.policy = "stream-pool", .streams = 2},
                                     {.policy = "fcfs", .streams = 1}};
  for (size_t i = 0; i < rf.stages.size(); ++i) rf.stages[i].policy = per_stage[i % 3];
  SimExecutor sim(sim_device("h100"), {.seed = 2});
  check_pipeline(rf, sim, {.policy = "fcfs", .streams = 1}, &sim);
  PipelinePolicy p(rf.stages, rf.schema, sim, {.policy = "fcfs", .streams = 1});
  const nlohmann::json j = p.stats();
  for (size_t i = 0; i < rf.stages.size(); ++i) {
    const auto policy = make_policy(*rf.stages[i].model, sim, per_stage[i % 3]);
    EXPECT_EQ(j["stages"][i]["policy"], policy->name()) << rf.stages[i].name;
  }
  EXPECT_NE(j["stages"][0]["policy"], j["stages"][1]["policy"]);
  EXPECT_NE(p.name().find("per stage"), std::string::npos) << p.name();
}

TEST(RecPipeline, ServedStagesEqualSequentialExecutionOnCpu) {
  RecFlow rf;
  CpuExecutor cpu(test_cpu_profile());
  check_pipeline(rf, cpu, {.policy = "stream-pool", .streams = 2}, nullptr);
}

// Timing-only: a stage keeps min(candidates, keep) rows whatever the scores, so the stages' sizes,
// and with them the schedule, are those of the computed run; the rows kept (by zero scores: the
// first ones) differ, their costs do not.
TEST(RecPipeline, TimingOnlyRunsTheSameSchedule) {
  RecFlow rf;
  std::vector<std::vector<SimSpan>> schedules;
  std::vector<std::vector<size_t>> sizes(2);
  for (bool compute : {true, false}) {
    SimExecutor sim(sim_device("h100"), {.seed = 4, .compute = compute});
    PipelineOptions popt;
    popt.on_stage = [&](int64_t, size_t, const std::vector<int64_t>& rows,
                        const std::vector<float>&) { sizes[compute].push_back(rows.size()); };
    PipelinePolicy p(rf.stages, rf.schema, sim, {.policy = "recos", .streams = 2}, popt);
    LoadOptions lo;
    lo.clients = 3;
    lo.duration_s = 0.0015;
    lo.warmup_s = 0;
    const LoadStats s = run_sim_load(p, sim, rf.pool, lo);
    EXPECT_EQ(s.errors, 0);
    EXPECT_GT(s.completed, 3);
    schedules.push_back(sim.schedule());
  }
  ASSERT_FALSE(schedules[0].empty());
  EXPECT_EQ(schedules[0], schedules[1]);
  EXPECT_EQ(sizes[0], sizes[1]);
}

TEST(RecPipeline, TopKIsByScoreThenRow) {
  EXPECT_EQ(top_k({0.5f, 0.9f, 0.5f, 0.1f, 0.9f}, 3), (std::vector<int64_t>{1, 4, 0}));
  EXPECT_EQ(top_k({0.2f, 0.3f}, 5), (std::vector<int64_t>{1, 0}));
  EXPECT_TRUE(top_k({0.2f}, 0).empty());
}

TEST(RecPipeline, RefusesStagesThatCannotReadTheSchema) {
  RecFlow rf;
  ModelConfig bad = rf.models[1].config();
  bad.item_tables[1].rows += 1;
  try {
    check_stage_schema(rf.schema, bad);
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("table item.1"), std::string::npos) << e.what();
  }
  ModelConfig longer = rf.models[0].config();
  longer.seq_len = 51;
  EXPECT_THROW(check_stage_schema(rf.schema, longer), InvalidArgument);
  SimExecutor sim(sim_device("h100"));
  std::vector<PipelineStage> st = rf.stages;
  st[2].keep = 0;
  EXPECT_THROW(PipelinePolicy(st, rf.schema, sim, {}), InvalidArgument);
  PipelinePolicy p(rf.stages, rf.schema, sim, {});
  QueryInputs q = *rf.pool[0];
  q.seq_ids[0].pop_back();
  EXPECT_THROW(p.submit(std::make_shared<QueryInputs>(q)), InvalidArgument);
}

std::string stats_error(const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = stats_json();
  edit(j);
  try {
    parse_recflow_stats(j, "stats.json");
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(RecFlowStats, CommittedFileNamesZooModelsAndItsSources) {
  const RecFlowStats s = parse_recflow_stats(stats_json(), "recflow-stats.json");
  ASSERT_EQ(s.stages.size(), 5u);
  EXPECT_EQ(s.stages[1].keep, 500);
  EXPECT_EQ(s.stages[3].keep, 10);
  EXPECT_EQ(s.seq_len, 50);
  EXPECT_NE(s.source.find("arXiv 2410.20868"), std::string::npos);
  const ModelConfig schema = zoo_config(s.schema_model);
  for (const auto& st : s.stages) EXPECT_NO_THROW(check_stage_schema(schema, zoo_config(st.model)));
}

TEST(RecFlowStats, BadFilesNameTheField) {
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string m = stats_error([](auto& j) { j["stages"][2]["keep"] = -5; });
  EXPECT_TRUE(has(m, "stages[2].keep") && has(m, "-5")) << m;
  m = stats_error([](auto& j) { j["candidates"].erase("median"); });
  EXPECT_TRUE(has(m, "candidates") && has(m, "median")) << m;
  m = stats_error([](auto& j) { j["dataset"]["users"] = -1; });
  EXPECT_TRUE(has(m, "dataset.users")) << m;
  m = stats_error([](auto& j) { j["candidates"]["min"] = 7000; });
  EXPECT_TRUE(has(m, "candidates.min") && has(m, "exceeds max")) << m;
  m = stats_error([](auto& j) { j.erase("seq_len"); });
  EXPECT_TRUE(has(m, "seq_len")) << m;
  m = stats_error([](auto& j) { j["stages"] = nlohmann::json::array(); });
  EXPECT_TRUE(has(m, "stages") && has(m, "at least one")) << m;
  m = stats_error([](auto& j) { j["zipf"] = 1; });
  EXPECT_TRUE(has(m, "unknown key 'zipf'")) << m;
}

TEST(RecFlowRequests, DeterministicValidAndOneUserPerRequest) {
  RecFlow rf;
  RecFlowRequests a(rf.schema, rf.stats, 3), b(rf.schema, rf.stats, 3);
  const RecModel schema_model = RecModel::generate(rf.schema);
  for (uint64_t i = 0; i < 4; ++i) {
    const QueryInputs q = a.make(i), r = b.make(i);
    EXPECT_EQ(q.item_ids, r.item_ids);
    EXPECT_EQ(q.ids, r.ids);
    EXPECT_GE(q.rows, 20);
    EXPECT_LE(q.rows, 60);
    EXPECT_NO_THROW(schema_model.validate(q));
    for (size_t t = 0; t < q.ids.size(); ++t)  // one user and context for every row
      for (int64_t row = 1; row < q.rows; ++row) EXPECT_EQ(q.ids[t][row], q.ids[t][0]);
  }
  EXPECT_NE(a.make(0).item_ids, a.make(1).item_ids);
  RecFlowStats wrong = rf.stats;
  wrong.seq_len = 20;
  EXPECT_THROW(RecFlowRequests(rf.schema, wrong, 1), InvalidArgument);
}

}  // namespace
}  // namespace tandem::rec
