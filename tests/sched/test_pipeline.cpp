// SPDX-License-Identifier: Apache-2.0
// The in-process pipeline: plans, sched.mlp, bit-exactness against a sequential run, queues,
// emulated devices and links.
#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <set>
#include <thread>

#include "sched_test_util.h"
#include "tandem/sched/probe.h"
#include "tandem/sched/queue.h"

namespace tandem::sched {
namespace {

using test::expect_bit_equal;
using test::mlp_plan;
using test::mlp_requests;

ClusterSpec two_linked(double latency_s, double bw, double speed1 = 1.0) {
  ClusterSpec c;
  DeviceProfile a;
  a.name = "a";
  a.peak_flops = 1e10;
  a.mem_bandwidth_bytes_per_s = 1e10;
  a.mem_bytes = 1e9;
  DeviceProfile b = a;
  b.name = "b";
  b.speed_factor = speed1;
  c.devices = {a, b};
  LinkProfile l;
  l.from = "a";
  l.to = "b";
  l.bandwidth_bytes_per_s = bw;
  l.latency_s = latency_s;
  c.links = {l};
  return c;
}

TEST(SchedPlan, ParsesTheContractAndRejectsBadPlans) {
  nlohmann::json j = {{"version", 1},
                      {"system", "hpipe"},
                      {"cluster", "c.json"},
                      {"prompt_len", 8},
                      {"micro_batches", 1},
                      {"slices", {3, 5}},
                      {"stages", {{{"device", "d0"}, {"stage", {{"kind", "sched.identity"}}}}}},
                      {"predicted", {{"latency_s", 0.5}}},
                      {"note", "kept"}};
  PipelinePlan p = PipelinePlan::from_json(j);
  EXPECT_EQ(p.slices, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(p.stages[0].device(), "d0");
  EXPECT_EQ(p.to_json()["note"], "kept");
  EXPECT_EQ(PipelinePlan::from_json(p.to_json()).to_json(), p.to_json());
  auto bad = j;
  bad["slices"] = {3, 4};
  EXPECT_THROW(PipelinePlan::from_json(bad), ParseError);
  bad = j;
  bad["version"] = 2;
  EXPECT_THROW(PipelinePlan::from_json(bad), ParseError);
  bad = j;
  bad["stages"] = nlohmann::json::array();
  EXPECT_THROW(PipelinePlan::from_json(bad), ParseError);
  bad = j;
  bad["stages"][0]["stage"] = {{"kind", 3}};
  EXPECT_THROW(PipelinePlan::from_json(bad), ParseError);
}

// A stage may run on a group of devices, each with its share; the JSON names the field at fault.
TEST(SchedPlan, GroupStagesCarryEachDevicesShare) {
  nlohmann::json j = {{"version", 1},
                      {"system", "pico"},
                      {"stages",
                       {{{"devices",
                          {{{"device", "pi0"}, {"share", {{"rows", {0, 28}}}}},
                           {{"device", "pi1"}, {"share", {{"rows", {28, 56}}}}}}},
                         {"stage", {{"kind", "sched.identity"}}}},
                        {{"device", "pi2"}, {"stage", {{"kind", "sched.identity"}}}}}}};
  const PipelinePlan p = PipelinePlan::from_json(j, "g.json");
  ASSERT_EQ(p.stages.size(), 2u);
  EXPECT_TRUE(p.stages[0].is_group());
  EXPECT_EQ(p.stages[0].device(), "pi0");
  EXPECT_EQ(p.stages[0].devices[1].share["rows"], nlohmann::json({28, 56}));
  EXPECT_EQ(p.stages[1].kind(), "sched.identity");
  EXPECT_EQ(p.devices(), (std::vector<std::string>{"pi0", "pi1", "pi2"}));
  EXPECT_EQ(PipelinePlan::from_json(p.to_json()).to_json(), p.to_json());
  EXPECT_FALSE(p.to_json()["stages"][1].contains("devices"));  // one device: written as before
  auto error_of = [](const nlohmann::json& bad) -> std::string {
    try {
      (void)PipelinePlan::from_json(bad, "g.json");
    } catch (const ParseError& e) {
      return e.what();
    }
    return "";
  };
  auto bad = j;
  bad["stages"][0]["devices"][1]["device"] = "pi0";
  EXPECT_NE(error_of(bad).find("stages[0].devices[1].device: device 'pi0' is repeated"),
            std::string::npos)
      << error_of(bad);
  bad = j;
  bad["stages"][1]["devices"] = nlohmann::json::array();
  EXPECT_NE(error_of(bad).find("stages[1]: expected either"), std::string::npos) << error_of(bad);
  bad = j;
  bad["stages"][0]["devices"] = nlohmann::json::array();
  EXPECT_NE(error_of(bad).find("stages[0].devices: expected 1 to"), std::string::npos);
  bad = j;
  bad["stages"][0]["devices"][0]["share"] = 3;
  EXPECT_NE(error_of(bad).find("stages[0].devices[0].share: expected an object"),
            std::string::npos);
  bad = j;
  bad["stages"][0]["devices"][0]["speed"] = 3;
  EXPECT_NE(error_of(bad).find("unknown key 'speed'"), std::string::npos);
  bad = j;
  bad["predicted"] = {{"latency_s", -1}};
  EXPECT_NE(error_of(bad).find("predicted.latency_s"), std::string::npos) << error_of(bad);
  // sched.identity registers no split/stitch: the runtime refuses to run it on a group.
  EXPECT_THROW(Pipeline(p, ClusterSpec{}, {}), InvalidArgument);
}

// A stage kind that runs on a group: each member squares-and-scales its rows of a [rows, d] f32
// tensor (rows [a, b) from its share; the whole tensor without one); split cuts the rows by the
// shares, stitch concatenates them. A group run must equal the one-device run bit for bit.
std::vector<float> values_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data<float>(), c.data<float>() + c.numel());
}

struct RowsStage : Stage {
  explicit RowsStage(const nlohmann::json& c) : scale(c.at("scale").get<float>()) {}
  std::string kind() const override { return "test.rows"; }
  Packet process(Packet p) override {
    std::vector<float> v = values_of(p.tensors.at(0));
    for (float& x : v) x = x * x * scale;
    p.tensors[0] = Tensor::from_vector(v, p.tensors[0].shape(), DType::kF32);
    return p;
  }
  float scale;
};
const StageKindRegistration kRowsKind("test.rows", [](const nlohmann::json& c) {
  return std::make_unique<RowsStage>(c);
});
const Registration kRowsGroup(
    group_ops_registry(), "test.rows",
    GroupOps{
        [](const Packet& in, const nlohmann::json&, const std::vector<nlohmann::json>& shares) {
          std::vector<Packet> parts;
          for (const auto& s : shares) {
            Packet p = in;
            p.tensors = {in.tensors.at(0).slice(0, s.at("rows")[0].get<int64_t>(),
                                                s.at("rows")[1].get<int64_t>())};
            parts.push_back(std::move(p));
          }
          return parts;
        },
        [](std::vector<Packet> parts, const nlohmann::json&, const std::vector<nlohmann::json>&) {
          std::vector<float> all;
          int64_t rows = 0, d = parts.at(0).tensors.at(0).shape()[1];
          for (const auto& p : parts) {
            const auto v = values_of(p.tensors.at(0));
            all.insert(all.end(), v.begin(), v.end());
            rows += p.tensors[0].shape()[0];
          }
          Packet out = std::move(parts[0]);
          out.tensors = {Tensor::from_vector(all, {rows, d}, DType::kF32)};
          return out;
        }});

// The group plan (a one-device stage, a 3-device group over rows [0,3) [3,4) [4,8), one more
// stage) against its one-device twin, run with local stages called directly or over inproc://.
void expect_group_stage_matches_one_device(bool direct) {
  auto shares = [](std::vector<int64_t> cuts, std::vector<std::string> devs) {
    std::vector<DeviceShare> g;
    for (size_t k = 0; k < devs.size(); ++k)
      g.push_back({devs[k], {{"rows", {cuts[k], cuts[k + 1]}}}});
    return g;
  };
  PipelinePlan group;
  group.stages.emplace_back("m0", nlohmann::json{{"kind", "test.rows"}, {"scale", 2.0}});
  group.stages.emplace_back(shares({0, 3, 4, 8}, {"g0", "g1", "g2"}),
                            nlohmann::json{{"kind", "test.rows"}, {"scale", 0.5}});
  group.stages.emplace_back("m1", nlohmann::json{{"kind", "test.rows"}, {"scale", 3.0}});
  group = PipelinePlan::from_json(group.to_json(), "group plan");  // through the JSON contract
  PipelinePlan one = group;
  one.stages[1] = PlanStage("g0", one.stages[1].stage);
  std::vector<Request> reqs;
  for (uint64_t id = 0; id < 4; ++id) {
    std::vector<float> v(8 * 5);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * float(i) - 0.1f * float(id);
    Request r{id, {}};
    r.micros.push_back(Packet{});
    r.micros[0].tensors = {Tensor::from_vector(v, {8, 5}, DType::kF32)};
    reqs.push_back(std::move(r));
  }
  const auto want = run_sequential(one, reqs);
  // A cluster that links the master to each member: the members' parts cross it.
  ClusterSpec cl;
  for (const char* d : {"m0", "g0", "g1", "g2", "m1"}) {
    DeviceProfile p;
    p.name = d;
    p.peak_flops = 1e9;
    p.mem_bandwidth_bytes_per_s = 1e9;
    p.mem_bytes = 1e9;
    cl.devices.push_back(p);
  }
  for (const char* d : {"g1", "g2"}) cl.links.push_back({"g0", d, 1e8, 1e-4, ""});
  PipelineOptions o;
  o.direct_local = direct;
  Pipeline pipe(group, cl, {}, o);
  const RunReport r = pipe.run(reqs);
  ASSERT_EQ(r.outputs.size(), want.size());
  for (const auto& [id, ps] : want)
    EXPECT_EQ(values_of(r.outputs.at(id).at(0).tensors.at(0)), values_of(ps.at(0).tensors.at(0)))
        << "request " << id;
  EXPECT_EQ(r.final_devices, (std::vector<std::string>{"m0", "g0", "g1", "g2", "m1"}));
  // A kind without split/stitch cannot run on a group.
  PipelinePlan bad = group;
  bad.stages[1].stage = {{"kind", "sched.identity"}};
  EXPECT_THROW(Pipeline(bad, cl, {}), InvalidArgument);
}

TEST(SchedPipeline, GroupStageDirectSplitsRunsEachShareAndStitchesBitExact) {
  expect_group_stage_matches_one_device(true);
}

TEST(SchedPipeline, GroupStageInprocSplitsRunsEachShareAndStitchesBitExact) {
  expect_group_stage_matches_one_device(false);
}

TEST(SchedMlp, SplittingLayersOverStagesIsBitExact) {
  auto whole = run_sequential(mlp_plan({"x"}, 6, 32, false), mlp_requests(3, {4, 2, 5}, 32));
  auto split =
      run_sequential(mlp_plan({"x", "y", "z"}, 6, 32, false), mlp_requests(3, {4, 2, 5}, 32));
  expect_bit_equal(split, whole);
  // The carried state (per stage, like a KV cache) makes later slices depend on earlier ones.
  auto carry = run_sequential(mlp_plan({"x"}, 6, 32, true), mlp_requests(3, {4, 2, 5}, 32));
  EXPECT_EQ(std::memcmp(carry[100][0].tensors[0].raw_data(), whole[100][0].tensors[0].raw_data(),
                        4 * 32 * 4),
            0);
  EXPECT_NE(std::memcmp(carry[100][1].tensors[0].raw_data(), whole[100][1].tensors[0].raw_data(),
                        2 * 32 * 4),
            0);
}

TEST(SchedMlp, RejectsBadConfigsAndOutOfOrderMicros) {
  EXPECT_THROW(make_stage({{"kind", "sched.mlp"}, {"d", 0}, {"last_layer", 1}}), InvalidArgument);
  EXPECT_THROW(make_stage({{"kind", "sched.mlp"}, {"d", 8}}), InvalidArgument);
  EXPECT_THROW(make_stage({{"kind", "sched.mlp"}, {"d", 8}, {"last_layer", 1}, {"bogus", 1}}),
               InvalidArgument);
  auto st = make_stage({{"kind", "sched.mlp"}, {"d", 8}, {"last_layer", 2}, {"carry", true}});
  Packet p;
  p.request_id = 1;
  p.micro = 1;
  p.n_micro = 2;
  p.tensors.push_back(mlp_stage_input(2, 8, 1, 1, 1));
  EXPECT_THROW(st->process(p), ContractError);  // micro 1 before micro 0
  p.tensors[0] = mlp_stage_input(2, 4, 1, 1, 1);
  p.micro = 0;
  EXPECT_THROW(st->process(p), InvalidArgument);  // wrong width
}

TEST(SchedPipeline, InprocThreeStagesEqualSequentialBitExact) {
  const auto plan = mlp_plan({"d0", "d1", "d2"}, 6, 48);
  const auto want = run_sequential(plan, mlp_requests(4, {5, 3, 7}, 48));
  Pipeline pipe(plan, ClusterSpec{}, {});  // every device "local": in-process workers, inproc://
  std::map<uint64_t, int> delivered;
  RunReport r = pipe.run(mlp_requests(4, {5, 3, 7}, 48),
                         [&](uint64_t id, const std::vector<Packet>&) { ++delivered[id]; });
  expect_bit_equal(r.outputs, want);
  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << id;
  ASSERT_EQ(r.timelines.size(), 3u);
  for (const auto& t : r.timelines) {
    EXPECT_EQ(t.kind, "stage");
    EXPECT_EQ(t.intervals.size(), 12u);
    for (const auto& iv : t.intervals) EXPECT_LE(iv.start_s, iv.end_s);
  }
  // Every packet leaves stage i before it enters stage i + 1.
  for (size_t s = 1; s < 3; ++s)
    for (const auto& iv : r.timelines[s].intervals)
      for (const auto& prev : r.timelines[s - 1].intervals)
        if (prev.request_id == iv.request_id && prev.micro == iv.micro)
          EXPECT_LE(prev.end_s, iv.start_s);
  EXPECT_EQ(r.replans, 0);
  auto j = r.to_json();
  EXPECT_EQ(j["timelines"].size(), 3u);
  EXPECT_GE(j["timelines"][0]["utilisation"].get<double>(), 0.0);
}

// The same three stages worker to worker (the default) and hub and spoke: bit-equal outputs; the
// intermediate activations (two hops of 4 requests x 15 rows x 256 f32) leave the coordinator's
// traffic and travel between the workers instead.
TEST(SchedPipeline, WorkerToWorkerEqualsHubAndSpokeAndBypassesTheCoordinator) {
  const auto plan = mlp_plan({"d0", "d1", "d2"}, 6, 256);
  const auto want = run_sequential(plan, mlp_requests(4, {5, 3, 7}, 256));
  std::map<Topology, RunReport> got;
  for (Topology t : {Topology::kWorkerToWorker, Topology::kHubAndSpoke}) {
    PipelineOptions o;
    o.topology = t;
    Pipeline pipe(plan, ClusterSpec{}, {}, o);
    got[t] = pipe.run(mlp_requests(4, {5, 3, 7}, 256));
    expect_bit_equal(got[t].outputs, want);
  }
  const RunReport &w2w = got[Topology::kWorkerToWorker], &hub = got[Topology::kHubAndSpoke];
  const uint64_t hop_bytes = 4 * 15 * 256 * 4;
  EXPECT_EQ(w2w.direct_hops, 2);
  EXPECT_GE(w2w.forwarded_bytes, 2 * hop_bytes);
  EXPECT_EQ(hub.direct_hops, 0);
  EXPECT_EQ(hub.forwarded_bytes, 0u);
  // Hub and spoke carries each intermediate activation twice (out of stage i, into stage i + 1).
  EXPECT_GE(hub.coordinator_bytes, w2w.coordinator_bytes + 2 * hop_bytes);
  EXPECT_EQ(w2w.to_json()["topology"]["direct_hops"], 2);
}

TEST(SchedPipeline, DirectLocalModeMatchesToo) {
  const auto plan = mlp_plan({"d0", "d1"}, 4, 16);
  PipelineOptions o;
  o.direct_local = true;
  Pipeline pipe(plan, ClusterSpec{}, {}, o);
  expect_bit_equal(pipe.run(mlp_requests(3, {2, 2}, 16)).outputs,
                   run_sequential(plan, mlp_requests(3, {2, 2}, 16)));
}

TEST(SchedPipeline, BoundedQueuesApplyBackpressure) {
  // The second device is 8x slower: the first stage fills its output queue and must wait.
  ClusterSpec c = two_linked(0.0, 1e12, 0.125);
  PipelineOptions o;
  o.queue_capacity = 1;
  o.emulate_links = false;
  Pipeline pipe(mlp_plan({"a", "b"}, 2, 64), c, {}, o);
  RunReport r = pipe.run(mlp_requests(6, {8, 8}, 64));
  ASSERT_EQ(r.timelines.size(), 2u);
  size_t blocked = 0;
  for (const auto& t : r.timelines) {
    EXPECT_LE(t.queue_max_depth, 1u);
    blocked += t.queue_blocked_pushes;
  }
  EXPECT_GT(blocked, 0u);
  for (const auto& t : r.timelines) EXPECT_EQ(t.intervals.size(), 12u);
}

TEST(SchedPipeline, EmulatedLinkDelaysEveryPacket) {
  const double latency = 0.01;
  ClusterSpec c = two_linked(latency, 1e6);
  const auto plan = mlp_plan({"a", "b"}, 2, 16);
  Pipeline pipe(plan, c, {});
  RunReport r = pipe.run(mlp_requests(2, {4, 4}, 16));
  expect_bit_equal(r.outputs, run_sequential(plan, mlp_requests(2, {4, 4}, 16)));
  ASSERT_EQ(r.timelines.size(), 3u);
  EXPECT_EQ(r.timelines[1].kind, "link");
  ASSERT_EQ(r.link_counters.size(), 1u);
  const LinkCounters& k = r.link_counters[0];
  EXPECT_EQ(k.messages, 4u);
  EXPECT_EQ(k.bytes, 4u * 4 * 16 * 4);
  EXPECT_EQ(k.drops, 0u);
  EXPECT_GE(k.delay_s, 4 * (latency + 4 * 16 * 4 / 1e6) - 1e-9);
  for (const auto& iv : r.timelines[1].intervals) {
    EXPECT_GE(iv.end_s - iv.start_s, latency);  // a sleep never ends early
    for (const auto& st : r.timelines[2].intervals)
      if (st.request_id == iv.request_id && st.micro == iv.micro) EXPECT_LE(iv.end_s, st.start_s);
  }
}

TEST(SchedPipeline, DroppedCopiesAreResentAndResultsUnchanged) {
  ClusterSpec c = two_linked(0.001, 1e9);
  PipelineOptions o;
  o.faults.drop = 0.4;
  o.faults.seed = 3;
  o.faults.retransmit_timeout_s = 0.002;
  const auto plan = mlp_plan({"a", "b"}, 2, 8);
  Pipeline pipe(plan, c, {}, o);
  RunReport r = pipe.run(mlp_requests(4, {2, 2, 2}, 8));
  expect_bit_equal(r.outputs, run_sequential(plan, mlp_requests(4, {2, 2, 2}, 8)));
  EXPECT_EQ(r.link_counters.at(0).messages, 12u);
  EXPECT_GT(r.link_counters.at(0).drops, 0u);
}

TEST(SchedPipeline, StageErrorsSurfaceInsteadOfHanging) {
  PipelinePlan plan = mlp_plan({"d0", "d1"}, 2, 16);
  plan.stages[1].stage["d"] = 8;  // stage 1 expects [T, 8] but gets [T, 16]
  Pipeline pipe(plan, ClusterSpec{}, {});
  EXPECT_THROW(pipe.run(mlp_requests(1, {2}, 16)), RemoteError);
  PipelinePlan unknown = mlp_plan({"d0"}, 1, 4);
  unknown.stages[0].stage = {{"kind", "no.such.kind"}};
  Pipeline p2(unknown, ClusterSpec{}, {});
  EXPECT_THROW(p2.run(mlp_requests(1, {2}, 4)), RemoteError);
  EXPECT_THROW(Pipeline(plan, ClusterSpec{}, {{"d0", "http://x"}}), InvalidArgument);
}

TEST(SchedPipeline, DefaultReplanMovesFailedStagesToTheLeastLoadedSurvivor) {
  auto next = default_replan({"a", "b", "c", "c"}, {"c"}, {"a", "b"});
  EXPECT_EQ(next, (std::vector<std::string>{"a", "b", "a", "b"}));
  EXPECT_THROW(default_replan({"a"}, {"a"}, {}), Infeasible);
}

// A stage that remembers every request it has seen until reset() (like a KV cache), counted
// process-wide.
std::atomic<int> g_live_states{0};
class RememberingStage : public Stage {
 public:
  std::string kind() const override { return "test.remember"; }
  Packet process(Packet in) override {
    if (seen_.insert(in.request_id).second) ++g_live_states;
    return in;
  }
  void reset(uint64_t id) override {
    if (seen_.erase(id)) --g_live_states;
  }
  ~RememberingStage() override { g_live_states -= static_cast<int>(seen_.size()); }

 private:
  std::set<uint64_t> seen_;
};
const StageKindRegistration kRemember("test.remember", [](const nlohmann::json&) {
  return std::make_unique<RememberingStage>();
});

TEST(SchedPipeline, FinishedRequestsAreResetInEveryStage) {
  PipelinePlan plan;
  for (const char* d : {"d0", "d1", "d0"}) plan.stages.push_back({d, {{"kind", "test.remember"}}});
  for (bool direct : {false, true}) {
    for (bool reset : {true, false}) {
      PipelineOptions o;
      o.direct_local = direct;
      o.reset_finished = reset;
      {
        Pipeline pipe(plan, ClusterSpec{}, {}, o);
        pipe.run(mlp_requests(5, {2, 2, 2}, 4));
        // Three stages x five requests remembered unless reset after their last micro-batch
        // (direct stages live for one run(); worker-hosted ones until re-configured).
        EXPECT_EQ(g_live_states.load(), reset || direct ? 0 : 15) << "direct " << direct;
      }
      EXPECT_EQ(g_live_states.load(), 0);  // the stages are gone with the pipeline
    }
  }
}

TEST(SchedQueue, TimesOutWhenFullAndWakesOnClose) {
  BoundedQueue<int> q(1);
  EXPECT_TRUE(q.push(1, 0.01));
  EXPECT_FALSE(q.push(2, 0.01));  // full
  EXPECT_EQ(q.blocked_pushes(), 1u);
  std::thread t([&] { EXPECT_FALSE(q.push(3, 10.0)); });
  q.close();
  t.join();
  EXPECT_EQ(q.pop(0.01), 1);
  EXPECT_EQ(q.pop(0.01), std::nullopt);
}

// LinkTracker (probe.h): the first sample is the estimate, later ones move it by alpha; a move of
// more than the threshold from the planned bandwidth counts, one within it does not; bad
// parameters and samples are refused.
TEST(SchedLinkTracker, SmoothsAndFlagsMovesPastTheThreshold) {
  LinkTracker t(0.5, 0.2);
  EXPECT_TRUE(t.empty());
  EXPECT_FALSE(t.moved_from(1e6));
  t.add(1e6);
  EXPECT_DOUBLE_EQ(t.bandwidth(), 1e6);
  EXPECT_FALSE(t.moved_from(1e6));
  t.add(0.5e6);  // 0.75e6: 25% below the plan's bandwidth
  EXPECT_DOUBLE_EQ(t.bandwidth(), 0.75e6);
  EXPECT_TRUE(t.moved_from(1e6));
  EXPECT_FALSE(t.moved_from(0.8e6));  // 6% from that plan's
  t.restart();                        // the next sample is the estimate again
  t.add(0.1e6);
  EXPECT_DOUBLE_EQ(t.bandwidth(), 0.1e6);
  EXPECT_THROW(t.add(0), InvalidArgument);
  EXPECT_THROW(t.add(std::numeric_limits<double>::infinity()), InvalidArgument);
  EXPECT_THROW(LinkTracker(0, 0.2), InvalidArgument);
  EXPECT_THROW(LinkTracker(0.5, 0), InvalidArgument);
  PipelineOptions o;
  EXPECT_THROW(probe_link("nowhere", ClusterSpec{}, {}, o), InvalidArgument);
}

// A stage that waits (sleeps) or works (spins on this thread's CPU clock) for `seconds`.
struct WaitOrWorkStage : Stage {
  WaitOrWorkStage(bool work, double seconds) : work(work), seconds(seconds) {}
  std::string kind() const override { return "test.wait_or_work"; }
  Packet process(Packet p) override {
    if (!work) {
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
      return p;
    }
    timespec t0{}, t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while (double(t.tv_sec - t0.tv_sec) + 1e-9 * double(t.tv_nsec - t0.tv_nsec) < seconds);
    return p;
  }
  bool work;
  double seconds;
};

// With one thread a device stretches the CPU time its stage used, not the wall time: time spent
// waiting (here a sleep; on a shared machine, other processes holding the core) is not multiplied
// by 1 / speed_factor.
TEST(SchedEmulation, OneThreadDeviceStretchesItsWorkNotItsWaiting) {
  const EmulatedDevice slow{.threads = 1, .speed_factor = 0.02};
  WaitOrWorkStage waiting(false, 0.005), working(true, 0.005);
  double waited = 0, worked = 0;
  slow.run(waiting, Packet{}, &waited);
  slow.run(working, Packet{}, &worked);
  EXPECT_GE(waited, 0.005);
  EXPECT_LT(waited, 0.2);  // stretched by 1 / 0.02 it would be 0.25 s
  // 5 ms of CPU time, 50x slower (a sleep never ends early)
  EXPECT_GE(worked, 0.25 - 1e-6);
  double measured = 0;
  slow.measure(working, Packet{}, &measured);
  EXPECT_GE(measured, 0.25 - 1e-6);
  EXPECT_LT(measured, 0.2 / 0.02);
}

}  // namespace
}  // namespace tandem::sched
