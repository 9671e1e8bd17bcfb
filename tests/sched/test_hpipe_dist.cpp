// SPDX-License-Identifier: Apache-2.0
// HPipe over real worker processes: a plan of "llm.layers" stages (HPipe's plan format, token
// slices) runs over 3 `tandem worker` processes on tcp loopback holding a cluster key; each worker
// loads the generated LLaMA GGUF by path and checks its sha256. Checks: the logits equal
// single-device Model::forward within f32 tolerance (max |diff| <= 1e-4 x max(1, max |logit|)),
// for a hand-cut HPipe plan and for the plan of every registered HPipe-family planner (batch 2);
// a worker SIGKILLed mid-run -> every request answered exactly once, bit-equal to the fault-free
// run; a coordinator holding another key is refused (and the worker logs it). The same run on
// the real SmolLM2 (when cached; skipped otherwise) with a Q4_1 tolerance of 1e-3.
#include <gtest/gtest.h>

#include "hpipe_dist_fixture.h"
#include "tandem/llm/model_store.h"

namespace tandem::sched {
namespace {

using test::HpipeDist;
using test::kCuts;
using test::kSlices;

TEST_F(HpipeDist, ThreeWorkerProcessesMatchSingleDeviceForward) {
  auto map = start_workers(3);
  const PipelinePlan plan = hpipe_plan(model_path_, kCuts, kSlices);
  std::vector<std::vector<int32_t>> prompts = {prompt(96, 1, 300), prompt(96, 2, 300)};
  Pipeline pipe(plan, ClusterSpec{}, map, options());
  const RunReport r = pipe.run(requests(prompts, kSlices));
  EXPECT_EQ(r.replans, 0);
  EXPECT_EQ(r.final_devices, (std::vector<std::string>{"dev0", "dev1", "dev2"}));
  expect_matches_forward(model_path_, prompts, r.outputs, 1e-4);
}

// Every registered HPipe-family planner's plan (Base: the batch as one packet; GPipe / GP-B: one
// prompt per micro-batch; TeraPipe / HPipe / uniform-K: token slices) runs over the same 3 worker
// processes and equals single-device Model::forward for every prompt of the batch.
TEST_F(HpipeDist, EveryPlannersPlanRunsOverThreeWorkersAndMatchesForward) {
  auto map = start_workers(3);
  const ClusterSpec cluster = linked_cluster(0.5);
  PipelineOptions o = options();
  o.emulate_links = false;
  llm::hpipe::PlanOptions po;
  po.batch = 2;
  std::vector<std::vector<int32_t>> prompts = {prompt(96, 21, 300), prompt(96, 22, 300)};
  for (const std::string system : {"base", "gpipe", "gp-b", "terapipe", "hpipe", "uniform-4"}) {
    SCOPED_TRACE(system);
    const PipelinePlan plan = llm::hpipe::layer_plan_for_run(
        llm::hpipe::make_plan(profile(), cluster, "loopback3", 96, system, po), system);
    EXPECT_EQ(plan.micro_batches, system == "base" ? 1 : 2);
    Pipeline pipe(plan, cluster, map, o);
    const RunReport r = pipe.run(plan_requests(plan, prompts));
    EXPECT_EQ(r.replans, 0);
    EXPECT_EQ(r.final_devices, (std::vector<std::string>{"dev0", "dev1", "dev2"}));
    EXPECT_EQ(r.direct_hops, 2);
    expect_matches_forward(model_path_, prompts, per_prompt(plan, r.outputs), 1e-4);
  }
}

TEST_F(HpipeDist, KilledWorkerMidRunEveryAnswerOnceAndEqualToFaultFree) {
  auto map = start_workers(3);
  const PipelinePlan plan = hpipe_plan(model_path_, kCuts, kSlices);
  std::vector<std::vector<int32_t>> prompts;
  for (uint32_t s = 0; s < 6; ++s) prompts.push_back(prompt(96, 10 + s, 300));

  Pipeline clean(plan, slow_middle_cluster(), map, options());
  const RunReport fault_free = clean.run(requests(prompts, kSlices));
  ASSERT_EQ(fault_free.replans, 0);

  Pipeline pipe(plan, slow_middle_cluster(), map, options());
  std::map<uint64_t, int> delivered;
  bool killed = false;
  const RunReport r =
      pipe.run(requests(prompts, kSlices), [&](uint64_t id, const std::vector<Packet>&) {
        ++delivered[id];
        if (!killed) {
          workers_[1]->signal(SIGKILL);
          killed = true;
        }
      });
  ASSERT_TRUE(killed);
  EXPECT_EQ(r.replans, 1);
  EXPECT_GT(r.requests_rerun, 0u);
  ASSERT_EQ(delivered.size(), prompts.size());
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "request " << id;
  EXPECT_EQ(std::count(r.final_devices.begin(), r.final_devices.end(), "dev1"), 0);
  ASSERT_FALSE(r.events.empty());
  EXPECT_NE(r.events[0].find("lost device 'dev1'"), std::string::npos) << r.events[0];
  expect_bit_equal(r.outputs, fault_free.outputs);
  expect_matches_forward(model_path_, prompts, r.outputs, 1e-4);
}

TEST_F(HpipeDist, CoordinatorWithAnotherKeyIsRefused) {
  auto map = start_workers(3);
  PipelineOptions o = options();
  o.key = ClusterKey::generate();
  o.client.connect_timeout_s = 1.0;
  o.max_replans = 0;
  Pipeline pipe(hpipe_plan(model_path_, kCuts, kSlices), ClusterSpec{}, map, o);
  EXPECT_THROW(pipe.run(requests({prompt(96, 3, 300)}, kSlices)), Error);
  std::string log;
  for (int i = 0; i < 100; ++i) {
    log = workers_[0]->log() + workers_[1]->log() + workers_[2]->log();
    if (log.find("refused a peer") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(log.find("refused a peer"), std::string::npos) << log;
}

// A plan whose stage model is /dev/zero (hashed forever before issue 24) is refused at once, and
// the same worker process then serves a valid plan.
TEST_F(HpipeDist, WorkerGivenABadPlanStaysResponsiveForTheNextRun) {
  auto map = start_workers(1);
  nlohmann::json bad = hpipe_plan(model_path_, {0, 6}, {96}).to_json();
  bad["stages"][0]["stage"]["model"] = "/dev/zero";
  PipelineOptions o = options();
  o.max_replans = 0;
  const auto t0 = std::chrono::steady_clock::now();
  {
    Pipeline pipe(PipelinePlan::from_json(bad, "bad plan"), ClusterSpec{}, map, o);
    try {
      pipe.run(requests({prompt(96, 5, 300)}, {96}));
      ADD_FAILURE() << "a /dev/zero model was accepted";
    } catch (const RemoteError& e) {
      EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  const std::vector<std::vector<int32_t>> prompts = {prompt(96, 6, 300)};
  Pipeline good(hpipe_plan(model_path_, {0, 6}, {96}), ClusterSpec{}, map, options());
  const RunReport r = good.run(requests(prompts, {96}));
  expect_matches_forward(model_path_, prompts, r.outputs, 1e-4);
}

// An LLM plan must run every layer of its model exactly once: gaps, overlaps, a short last stage,
// 64-bit layer numbers and cuts that disagree with the stages are refused before anything runs.
TEST_F(HpipeDist, LayerPlansMustCoverTheModelExactlyOnce) {
  auto error_of = [&](const nlohmann::json& j) -> std::string {
    try {
      (void)llm::hpipe::layer_plan_for_run(PipelinePlan::from_json(j, "p.json"), "p.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  const nlohmann::json good = hpipe_plan(model_path_, kCuts, kSlices).to_json();
  EXPECT_EQ(error_of(good), "");
  nlohmann::json gap = good;
  gap["stages"][1]["stage"]["first_layer"] = 2;
  gap.erase("cuts");
  EXPECT_NE(error_of(gap).find("does not continue stage 0"), std::string::npos) << error_of(gap);
  nlohmann::json overlap = gap;
  overlap["stages"][1]["stage"]["first_layer"] = 0;
  EXPECT_NE(error_of(overlap).find("does not continue"), std::string::npos);
  nlohmann::json shorter = good;
  shorter["stages"][2]["stage"]["last_layer"] = 5;
  shorter.erase("cuts");
  EXPECT_NE(error_of(shorter).find("has 6 layers (each must run exactly once)"), std::string::npos)
      << error_of(shorter);
  nlohmann::json huge = good;
  huge["stages"][0]["stage"]["last_layer"] = uint64_t{1} << 40;
  EXPECT_NE(error_of(huge).find("last_layer"), std::string::npos) << error_of(huge);
  nlohmann::json cuts = good;
  cuts["cuts"] = {0, 2, 4, 6};
  EXPECT_NE(error_of(cuts).find("cuts: [0,2,4,6] differ from the stages' layer ranges [0,1,4,6]"),
            std::string::npos)
      << error_of(cuts);
  nlohmann::json batch = good;
  batch["batch"] = 1 << 30;
  EXPECT_NE(error_of(batch).find("exceed the limit of 4096"), std::string::npos) << error_of(batch);
  // The stage itself checks layer numbers in 64 bits (2^40 used to wrap to 0 and run).
  nlohmann::json stage = good["stages"][0]["stage"];
  stage["first_layer"] = uint64_t{1} << 40;
  try {
    (void)make_stage(stage);
    ADD_FAILURE() << "first_layer 2^40 was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'first_layer' = 1099511627776"), std::string::npos)
        << e.what();
  }
}

// --verify's reference is the whole model on one device, not the plan's own split.
TEST_F(HpipeDist, VerifyReferenceIsOneStageOverTheWholeModel) {
  const auto hp = llm::hpipe::layer_plan_for_run(hpipe_plan(model_path_, kCuts, kSlices), "p");
  const PipelinePlan one = llm::hpipe::single_device_plan(hp);
  ASSERT_EQ(one.stages.size(), 1u);
  const nlohmann::json& s = one.stages[0].stage;
  EXPECT_EQ(s["first_layer"], 0);
  EXPECT_EQ(s["last_layer"], 6);
  EXPECT_TRUE(s["embed"].get<bool>());
  EXPECT_TRUE(s["head"].get<bool>());
  EXPECT_EQ(one.slices, (std::vector<int64_t>(kSlices.begin(), kSlices.end())));
  const auto prompts = std::vector<std::vector<int32_t>>{prompt(96, 7, 300)};
  expect_matches_forward(model_path_, prompts, run_sequential(one, requests(prompts, kSlices)),
                         1e-4);
}

// The real SmolLM2-135M (Q4_1, 30 layers) when it is in the model cache; its Q4_1 GEMM quantizes
// activations per row, so the tolerance is 1e-3 of the largest logit.
TEST_F(HpipeDist, SmolLM2OverThreeWorkersMatchesSingleDevice) {
  llm::FetchOptions fo;
  fo.allow_fetch = false;
  const std::string path = llm::cached_model_path(llm::default_model_source(), fo);
  if (path.empty())
    GTEST_SKIP()
        << "SmolLM2 not in the model cache (any `tandem` LLM command without -m fetches it)";
  auto map = start_workers(3);
  const std::vector<int> slices = {24, 8, 16, 16};
  const PipelinePlan plan = hpipe_plan(path, {0, 8, 20, 30}, slices);
  std::vector<std::vector<int32_t>> prompts = {prompt(64, 4, 49152)};
  Pipeline pipe(plan, ClusterSpec{}, map, options());
  const RunReport r = pipe.run(requests(prompts, slices));
  EXPECT_EQ(r.replans, 0);
  expect_matches_forward(path, prompts, r.outputs, 1e-3);
}

}  // namespace
}  // namespace tandem::sched
