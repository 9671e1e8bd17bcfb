// SPDX-License-Identifier: Apache-2.0
// Fault suite of the LLM pipeline (issue 16, label "fault"): 16 requests in flight over 3
// `tandem worker` processes while worker 1 is SIGKILLed or SIGSTOPped -> every request answered
// exactly once, bit-equal to the fault-free run, and a second batch runs on the survivors (after
// the SIGKILL HPipe's re-plan re-splits the layers over them with DP 1; after the SIGSTOP the
// default re-plan moves the stopped worker's stage whole); a
// coordinator whose plan does not fit the worker (another model hash, another model at the path, a
// stage the model does not have, an unknown stage kind) is refused with a message naming the
// worker, the stage kind and the hashes, and the worker then serves a valid plan.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "sched/hpipe_dist_fixture.h"

namespace tandem::sched {
namespace {

namespace fs = std::filesystem;
using test::HpipeDist;
using test::kCuts;
using test::kSlices;

class HpipeFault : public HpipeDist {
 protected:
  static std::vector<std::vector<int32_t>> prompts(int n, uint32_t seed) {
    std::vector<std::vector<int32_t>> ps;
    for (int i = 0; i < n; ++i) ps.push_back(prompt(96, seed + static_cast<uint32_t>(i), 300));
    return ps;
  }
  // Options with room for many micro-batches in flight at once.
  PipelineOptions wide_options() const {
    PipelineOptions o = options();
    o.queue_capacity = 8;
    return o;
  }

  // 16 requests; `sig` hits worker 1 once the first answer is back. Then a second batch of 16 on
  // the same coordinator, which must run on the two survivors. `resplit`: HPipe's re-plan
  // (replan_over_survivors: DP 1 re-splits the 6 layers over dev0 and dev2, two stages), else the
  // default re-plan (dev1's stage moves whole to a survivor, three stages).
  void run_with_fault(int sig, bool resplit) {
    auto map = start_workers(3);
    const PipelinePlan plan = hpipe_plan(model_path_, kCuts, kSlices);
    const auto first = prompts(16, 100), second = prompts(16, 300);
    const ClusterSpec cluster = linked_cluster();
    PipelineOptions o = wide_options();
    o.emulate_links = false;  // the links are for the planner; hops stay worker to worker
    PipelinePlan replanned;
    if (resplit) {
      o.replan_plan = [&, dp = llm::hpipe::replan_over_survivors(profile(), cluster)](
                          const PipelinePlan& current, const std::vector<std::string>& failed,
                          const std::vector<std::string>& alive) {
        replanned = dp(current, failed, alive);
        return replanned;
      };
    }
    RunReport clean_first, clean_second;
    {
      Pipeline clean(plan, cluster, map, o);
      clean_first = clean.run(requests(first, kSlices));
      clean_second = clean.run(requests(second, kSlices, 500));
      ASSERT_EQ(clean_first.replans + clean_second.replans, 0);
      ASSERT_EQ(clean_first.direct_hops, 2);  // worker to worker (the default topology)
    }

    Pipeline pipe(plan, cluster, map, o);
    std::map<uint64_t, int> delivered;
    bool faulted = false;
    const RunReport r =
        pipe.run(requests(first, kSlices), [&](uint64_t id, const std::vector<Packet>&) {
          ++delivered[id];
          if (!faulted) workers_[1]->signal(sig);
          faulted = true;
        });
    ASSERT_TRUE(faulted);
    EXPECT_EQ(r.replans, 1);
    EXPECT_GT(r.requests_rerun, 0u);
    ASSERT_EQ(delivered.size(), first.size());  // nothing lost
    for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "request " << id << " answered twice";
    EXPECT_EQ(std::count(r.final_devices.begin(), r.final_devices.end(), "dev1"), 0);
    ASSERT_FALSE(r.events.empty());
    EXPECT_NE(r.events[0].find("lost device 'dev1'"), std::string::npos) << r.events[0];
    expect_bit_equal(r.outputs, clean_first.outputs);
    if (resplit) {
      // The layers per surviving worker are DP 1's over dev0 and dev2 (its cut, not dev1's stage
      // moved whole); the token slices are the running plan's.
      ClusterSpec survivors = cluster;
      survivors.devices.erase(survivors.devices.begin() + 1);
      std::erase_if(survivors.links,
                    [](const LinkProfile& l) { return l.from == "dev1" || l.to == "dev1"; });
      const std::vector<int> want = llm::hpipe::partition_layers(profile(), survivors, 96, 1);
      EXPECT_EQ(llm::hpipe::layer_stages(replanned).cuts(), want);
      EXPECT_EQ(r.final_devices, (std::vector<std::string>{"dev0", "dev2"}));
      EXPECT_EQ(replanned.slices, plan.slices);
      ASSERT_GE(r.events.size(), 2u);
      EXPECT_NE(r.events[1].find("re-plan: 2 stages over dev0, dev2"), std::string::npos)
          << r.events[1];
      EXPECT_EQ(r.direct_hops, 1);  // the one hop left forwards worker to worker
    } else {
      EXPECT_EQ(r.final_devices.size(), 3u);
      EXPECT_EQ(r.direct_hops, 2);  // the re-planned pipeline forwards worker to worker too
    }

    // Still serving: the next batch runs on dev0 and dev2 alone, each answer once and unchanged.
    delivered.clear();
    const RunReport r2 =
        pipe.run(requests(second, kSlices, 500),
                 [&](uint64_t id, const std::vector<Packet>&) { ++delivered[id]; });
    EXPECT_EQ(r2.replans, 0);
    EXPECT_EQ(std::count(r2.final_devices.begin(), r2.final_devices.end(), "dev1"), 0);
    ASSERT_EQ(delivered.size(), second.size());
    for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << "request " << id;
    expect_bit_equal(r2.outputs, clean_second.outputs);
  }

  // Runs `plan` on workers that must refuse it; returns the error's message.
  std::string refusal(const PipelinePlan& plan, const std::map<std::string, std::string>& map) {
    PipelineOptions o = options();
    o.max_replans = 0;
    o.run_timeout_s = 30;  // a hang fails the test instead of stalling CI
    Pipeline pipe(plan, ClusterSpec{}, map, o);
    try {
      pipe.run(requests({prompt(96, 9, 300)}, {96}));
    } catch (const RemoteError& e) {
      return e.what();
    } catch (const Error& e) {
      return std::string("not a refusal by the worker: ") + e.what();
    }
    return "accepted";
  }
};

TEST_F(HpipeFault, WorkerKilledWithSixteenRequestsInFlight) { run_with_fault(SIGKILL, true); }

TEST_F(HpipeFault, WorkerStoppedWithSixteenRequestsInFlight) { run_with_fault(SIGSTOP, false); }

TEST_F(HpipeFault, PlanThatDoesNotFitTheWorkerIsRefusedWithAMessage) {
  auto map = start_workers(1);
  const std::string& ep = map.at("dev0");
  const std::string real_sha = llm::sha256_file(model_path_);
  const PipelinePlan good = hpipe_plan(model_path_, {0, 6}, {96});

  // The plan's hash is not the file's.
  nlohmann::json j = good.to_json();
  const std::string wrong_sha(64, 'a');
  j["stages"][0]["stage"]["sha256"] = wrong_sha;
  std::string m = refusal(PipelinePlan::from_json(j, "plan"), map);
  EXPECT_NE(m.find("worker " + ep + ": llm.layers: model '" + model_path_ + "' has sha256 " +
                   real_sha + ", the plan expects " + wrong_sha),
            std::string::npos)
      << m;

  // The path holds another model than the one the plan was made for.
  const std::string other = (dir_ / "other.gguf").string();
  write_model(other, 99);
  j = good.to_json();
  j["stages"][0]["stage"]["model"] = other;
  m = refusal(PipelinePlan::from_json(j, "plan"), map);
  EXPECT_NE(m.find("llm.layers: model '" + other + "' has sha256 " + llm::sha256_file(other) +
                   ", the plan expects " + real_sha),
            std::string::npos)
      << m;

  // A stage the model does not have (layers 0..9 of 6), and a kind the worker does not know.
  j = good.to_json();
  j["stages"][0]["stage"]["last_layer"] = 9;
  m = refusal(PipelinePlan::from_json(j, "plan"), map);
  EXPECT_NE(m.find("worker " + ep + ": llm.layers: layers [0, 9) outside the model's 6 layers"),
            std::string::npos)
      << m;
  j = good.to_json();
  j["stages"][0]["stage"]["kind"] = "llm.no-such-kind";
  m = refusal(PipelinePlan::from_json(j, "plan"), map);
  EXPECT_NE(m.find("worker " + ep + ":"), std::string::npos) << m;
  EXPECT_NE(m.find("llm.no-such-kind"), std::string::npos) << m;

  // The worker that refused four plans serves the right one.
  const auto ps = prompts(2, 40);
  Pipeline pipe(good, ClusterSpec{}, map, options());
  const RunReport r = pipe.run(requests(ps, {96}));
  expect_matches_forward(model_path_, ps, r.outputs, 1e-4);
}

// A long-lived worker loaded the model once; the file at that path is then replaced by another
// model. A plan naming the old hash must be refused (the worker must not trust the hash it
// computed for the old file), and a plan naming the new hash runs the new model.
TEST_F(HpipeFault, ModelReplacedUnderALongLivedWorkerIsReverified) {
  auto map = start_workers(1);
  const std::string path = (dir_ / "model.gguf").string();
  fs::copy_file(model_path_, path);
  const PipelinePlan old_plan = hpipe_plan(path, {0, 6}, {96});
  const auto ps = prompts(1, 60);
  {
    Pipeline pipe(old_plan, ClusterSpec{}, map, options());
    expect_matches_forward(path, ps, pipe.run(requests(ps, {96})).outputs, 1e-4);
  }
  const std::string tmp = (dir_ / "model.gguf.new").string();
  write_model(tmp, 77);
  fs::rename(tmp, path);
  const std::string new_sha = llm::sha256_file(path);

  const std::string m = refusal(old_plan, map);
  EXPECT_NE(m.find("has sha256 " + new_sha + ", the plan expects " + llm::sha256_file(model_path_)),
            std::string::npos)
      << m;
  Pipeline pipe(hpipe_plan(path, {0, 6}, {96}), ClusterSpec{}, map, options());
  expect_matches_forward(path, ps, pipe.run(requests(ps, {96})).outputs, 1e-4);
}

}  // namespace
}  // namespace tandem::sched
