// SPDX-License-Identifier: Apache-2.0
// `tandem pipeline run`: runs a pipeline plan (any stage kinds) over local emulated devices and
// `tandem worker` processes, and reports per-stage utilisation, bubbles and measured vs predicted
// latency. `tandem pipeline overhead`: the runtime's per-packet cost against memcpy and raw ZeroMQ.
#include <zmq.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "commands.h"
#include "report.h"
#include "tandem/core/build_info.h"
#include "tandem/llm/hpipe.h"
#include "tandem/sched/client.h"
#include "tandem/sched/mlp_stage.h"
#include "tandem/sched/pipeline.h"
#include "tandem/sched/worker.h"

namespace tandem::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct PipelineRunOptions {
  std::string plan;
  std::string cluster;
  std::vector<std::string> workers;  // dev=endpoint
  std::string key;
  int requests = 0;  // 0: the plan's micro_batches
  int queue = 2;
  bool direct = false;
  bool no_links = false;
  std::string topology = "w2w";  // "w2w" (worker to worker) | "hub" (hub and spoke)
  bool verify = false;
  bool last_only = false;
  double jitter_ms = 0;
  double drop = 0;
  double heartbeat_timeout_s = 1.0;
  double configure_timeout_s = 300.0;
  double run_timeout_s = 600.0;
  int vocab = 256;
  uint64_t seed = 1;
  std::string json_path;
  std::string replan_profile;  // HPipe model profile: re-split layers over survivors on a loss
};

struct OverheadOptions {
  std::vector<int64_t> sizes = {4096, 65536, 1 << 20, 16 << 20};
  int reps = 30;
  std::string json_path;
};

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) throw IoError("cannot write '" + path + "'");
}

// The first stage decides what a request's micro-batch looks like; an embedding stage takes
// `sequences` prompts of `tokens` ids at once ([tokens] for one, [sequences, tokens] for more).
Tensor make_input(const nlohmann::json& first, int64_t tokens, int64_t sequences,
                  const PipelineRunOptions& o, uint64_t request, int32_t micro) {
  std::mt19937_64 rng(o.seed * 1000003 + request * 7919 + static_cast<uint64_t>(micro));
  if (first.value("embed", false)) {
    const int64_t vocab = first.contains("vocab") && first["vocab"].is_number_integer()
                              ? first["vocab"].get<int64_t>()
                              : o.vocab;
    std::vector<int32_t> ids(static_cast<size_t>(tokens * sequences));
    for (auto& id : ids)
      id = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::max<int64_t>(vocab, 1)));
    return Tensor::from_vector(ids, sequences == 1 ? Shape{tokens} : Shape{sequences, tokens},
                               DType::kI32);
  }
  for (const char* key : {"d", "d_model"})
    if (first.contains(key) && first[key].is_number_integer())
      return sched::mlp_stage_input(tokens, first[key].get<int64_t>(), o.seed, request, micro);
  throw InvalidArgument("pipeline run: cannot make inputs for a first stage of kind '" +
                        first.value("kind", std::string("?")) +
                        "' (it needs \"embed\": true for token ids, or an integer \"d\")");
}

bool is_layer_plan(const sched::PipelinePlan& plan) {
  return plan.stages.front().kind() == "llm.layers";
}

// Prompts in each request's packets (layer_stages() checked that micro_batches divides batch).
int64_t sequences_per_request(const sched::PipelinePlan& plan) {
  return plan.batch > 0 ? plan.batch / plan.micro_batches : 1;
}

// What --verify compares against: for an LLM plan, the whole model on one device (independent of
// the plan's layer split); for other stage kinds, the plan's own stages run in sequence in process.
sched::PipelinePlan verify_reference(const sched::PipelinePlan& plan, const std::string& path) {
  if (!is_layer_plan(plan)) return plan;
  return llm::hpipe::single_device_plan(llm::hpipe::layer_plan_for_run(plan, path));
}

int run_pipeline(const PipelineRunOptions& o) {
  sched::PipelinePlan plan = sched::PipelinePlan::from_json_file(o.plan);
  // An LLM plan must run every layer of its model exactly once, in order.
  if (is_layer_plan(plan)) (void)llm::hpipe::layer_plan_for_run(plan, o.plan);
  ClusterSpec cluster;
  std::string cluster_path = o.cluster;
  if (cluster_path.empty() && !plan.cluster.empty()) {
    // The plan's "cluster": a path as given (from the working directory), else beside the plan.
    const std::string beside =
        (std::filesystem::path(o.plan).parent_path() / plan.cluster).string();
    if (std::ifstream(plan.cluster))
      cluster_path = plan.cluster;
    else if (std::ifstream(beside))
      cluster_path = beside;
  }
  if (!cluster_path.empty()) cluster = ClusterSpec::from_json_file(cluster_path);
  for (const auto& d : plan.devices())
    if (!cluster_path.empty() && !cluster.has_device(d))
      throw InvalidArgument("pipeline run: plan device '" + d + "' is not in " + cluster_path);
  const std::map<std::string, std::string> workers = worker_map(o.workers, "pipeline run");
  sched::PipelineOptions po;
  po.queue_capacity = static_cast<size_t>(o.queue);
  po.direct_local = o.direct;
  po.emulate_links = !o.no_links;
  po.topology =
      o.topology == "hub" ? sched::Topology::kHubAndSpoke : sched::Topology::kWorkerToWorker;
  po.faults.jitter_s = o.jitter_ms * 1e-3;
  po.faults.drop = o.drop;
  po.faults.seed = o.seed;
  po.client.heartbeat_timeout_s = o.heartbeat_timeout_s;
  po.client.heartbeat_interval_s = std::min(0.1, o.heartbeat_timeout_s / 4);
  po.client.configure_timeout_s = o.configure_timeout_s;
  po.run_timeout_s = o.run_timeout_s;
  if (!o.key.empty()) po.key = sched::ClusterKey::load(o.key);
  if (!o.replan_profile.empty()) {
    if (!is_layer_plan(plan) || cluster_path.empty())
      throw InvalidArgument(
          "pipeline run: --replan-profile re-plans LLM (llm.layers) plans and needs the cluster");
    po.replan_plan = llm::hpipe::replan_over_survivors(
        llm::hpipe::ModelProfile::load(o.replan_profile), cluster);
  }

  std::vector<int64_t> slices = plan.slices;
  if (slices.empty()) {
    if (plan.prompt_len <= 0)
      throw InvalidArgument("pipeline run: the plan has neither \"slices\" nor \"prompt_len\"");
    slices = {plan.prompt_len};
  }
  const int n_requests = o.requests > 0 ? o.requests : static_cast<int>(plan.micro_batches);
  // An LLM plan's batch runs as micro_batches requests of batch / micro_batches prompts each
  // (GPipe and the token-sliced systems: one prompt per request; Base: the whole batch at once).
  const int64_t sequences = is_layer_plan(plan) ? sequences_per_request(plan) : 1;
  auto make_requests = [&] {
    std::vector<sched::Request> rs;
    for (int r = 0; r < n_requests; ++r) {
      sched::Request q;
      q.id = static_cast<uint64_t>(r);
      int64_t pos = 0;
      for (size_t m = 0; m < slices.size(); ++m) {
        sched::Packet p;
        p.tensors.push_back(make_input(plan.stages[0].stage, slices[m], sequences, o, q.id,
                                       static_cast<int32_t>(m)));
        p.meta = {{"pos_start", pos}, {"seq", m}};
        if (o.last_only) p.meta["last_only"] = true;
        pos += slices[m];
        q.micros.push_back(std::move(p));
      }
      rs.push_back(std::move(q));
    }
    return rs;
  };

  sched::Pipeline pipe(plan, cluster, workers, po);
  sched::RunReport r = pipe.run(make_requests());
  nlohmann::json j = r.to_json();
  const int64_t tokens =
      n_requests * sequences * std::accumulate(slices.begin(), slices.end(), int64_t{0});
  j["plan"] = o.plan;
  j["cluster"] = cluster_path;
  j["system"] = plan.system;
  j["topology"]["mode"] = o.topology == "hub" ? "hub-and-spoke" : "worker-to-worker";
  j["tokens"] = tokens;
  j["measured"] = {{"latency_s", r.makespan_s},
                   {"throughput_tokens_per_s", r.makespan_s > 0 ? tokens / r.makespan_s : 0.0}};
  j["predicted"] = plan.predicted.to_json();
  if (o.verify) {
    auto want = sched::run_sequential(verify_reference(plan, o.plan), make_requests());
    int64_t equal = 0, total = 0;
    for (const auto& [id, ps] : want)
      for (size_t m = 0; m < ps.size(); ++m) {
        ++total;
        const Tensor& a = ps[m].tensors.at(0);
        const auto& got = r.outputs.at(id).at(m).tensors.at(0);
        if (a.shape() == got.shape() &&
            std::memcmp(a.raw_data(), got.raw_data(), static_cast<size_t>(a.nbytes())) == 0)
          ++equal;
      }
    j["verify"] = {{"bit_exact", equal}, {"outputs", total}};
  }

  std::printf("pipeline %s (%s): %d requests x %lld prompts x %zu slices, %lld tokens\n",
              o.plan.c_str(), plan.system.c_str(), n_requests, static_cast<long long>(sequences),
              slices.size(), static_cast<long long>(tokens));
  std::printf("| timeline | device | packets | busy s | utilisation | bubble s | queue max |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& t : j["timelines"])
    std::printf("| %s | %s | %d | %.4f | %.1f%% | %.4f | %d |\n",
                t["name"].get<std::string>().c_str(), t["device"].get<std::string>().c_str(),
                t["packets"].get<int>(), t["busy_s"].get<double>(),
                100 * t["utilisation"].get<double>(), t["bubble_s"].get<double>(),
                t["queue_max_depth"].get<int>());
  std::printf("measured latency %.4f s, %.1f tokens/s", r.makespan_s,
              j["measured"]["throughput_tokens_per_s"].get<double>());
  if (plan.predicted.latency_s > 0) {
    const double pred = plan.predicted.latency_s;
    std::printf("; predicted %.4f s (measured / predicted = %.3f)", pred,
                pred > 0 ? r.makespan_s / pred : 0.0);
  }
  std::printf("\n");
  std::printf(
      "topology %s: %d stage-to-stage hops worker to worker; the coordinator moved %llu "
      "bytes, the workers forwarded %llu bytes to each other\n",
      o.topology == "hub" ? "hub-and-spoke" : "worker-to-worker", r.direct_hops,
      static_cast<unsigned long long>(r.coordinator_bytes),
      static_cast<unsigned long long>(r.forwarded_bytes));
  for (const auto& e : r.events) std::printf("event: %s\n", e.c_str());
  if (o.verify)
    std::printf("verify: %lld of %lld outputs bit-exact with %s\n",
                static_cast<long long>(j["verify"]["bit_exact"].get<int64_t>()),
                static_cast<long long>(j["verify"]["outputs"].get<int64_t>()),
                is_layer_plan(plan) ? "the whole model run on one device"
                                    : "the plan's stages run in sequence");
  if (!o.json_path.empty()) write_json(o.json_path, j);
  if (o.verify && j["verify"]["bit_exact"] != j["verify"]["outputs"]) return 1;
  return 0;
}

// --- overhead -----------------------------------------------------------------------------------

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int reps_for(int reps, int64_t bytes) {
  return std::max(5, static_cast<int>(std::min<int64_t>(
                         reps, (int64_t{256} << 20) / std::max<int64_t>(bytes, 1))));
}

// One round trip of `bytes` through a raw DEALER/ROUTER echo (the loopback bound for tcp://).
std::vector<double> raw_zmq_round_trips(const std::string& listen, int64_t bytes, int reps) {
  sched::ZmqSocket router(ZMQ_ROUTER);
  router.bind(listen);
  const std::string ep = router.endpoint();
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    while (!stop.load()) {
      auto f = router.recv(0.05);
      if (f && f->size() == 2) router.send(*f);
    }
  });
  sched::ZmqSocket dealer(ZMQ_DEALER);
  dealer.connect(ep);
  const std::string payload(static_cast<size_t>(bytes), 'x');
  std::vector<double> t;
  for (int i = 0; i < reps + 2; ++i) {
    const auto t0 = Clock::now();
    dealer.send(payload);
    auto r = dealer.recv(10.0);
    if (!r) throw sched::TransportError("raw echo timed out");
    if (i >= 2) t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  stop.store(true);
  echo.join();
  return t;
}

std::vector<double> worker_round_trips(const std::string& listen,
                                       const std::optional<sched::ClusterKey>& key, int64_t bytes,
                                       int reps) {
  sched::WorkerOptions wo;
  wo.listen = listen;
  wo.key = key;
  sched::Worker w(wo);
  std::thread t([&] { w.run(); });
  std::vector<double> out;
  try {
    sched::WorkerClient c(w.endpoint(), key);
    c.hello();
    c.configure(0, {{"kind", "sched.identity"}}, sched::EmulatedDevice{});
    sched::Packet p;
    p.tensors.push_back(Tensor::zeros(Shape{bytes / 4}, DType::kF32));
    for (int i = 0; i < reps + 2; ++i) {
      const auto t0 = Clock::now();
      sched::Packet r = c.process(0, p);
      if (i >= 2) out.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  } catch (...) {
    w.stop();
    t.join();
    throw;
  }
  w.stop();
  t.join();
  return out;
}

std::vector<double> direct_pipeline_per_packet(int64_t bytes, int reps) {
  sched::PipelinePlan plan;
  plan.stages.push_back({"host", {{"kind", "sched.identity"}}});
  sched::PipelineOptions po;
  po.direct_local = true;
  sched::Pipeline pipe(plan, ClusterSpec{}, {}, po);
  std::vector<double> out;
  for (int i = 0; i < reps + 2; ++i) {
    sched::Request q;
    q.id = static_cast<uint64_t>(i);
    sched::Packet p;
    p.tensors.push_back(Tensor::zeros(Shape{bytes / 4}, DType::kF32));
    q.micros.push_back(std::move(p));
    std::vector<sched::Request> rs;
    rs.push_back(std::move(q));
    const auto t0 = Clock::now();
    pipe.run(std::move(rs));
    if (i >= 2) out.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return out;
}

int run_overhead(const OverheadOptions& o) {
  nlohmann::json rows = nlohmann::json::array();
  std::optional<sched::ClusterKey> key;
  if (sched::zmq_has_curve()) key = sched::ClusterKey::generate();
  std::printf(
      "Microseconds per round trip, median / best of the repetitions.\n\n| bytes | memcpy x2 | "
      "raw zmq inproc | tandem inproc | raw zmq tcp | tandem tcp | tandem tcp+CURVE | direct "
      "pipeline run |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (int64_t bytes : o.sizes) {
    if (bytes < 4 || bytes % 4 != 0 || bytes > (int64_t{256} << 20))
      throw InvalidArgument("pipeline overhead: sizes must be multiples of 4 in [4, 256 MiB]");
    const int reps = reps_for(o.reps, bytes);
    std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes));
    std::vector<double> mc;
    for (int i = 0; i < reps + 2; ++i) {
      const auto t0 = Clock::now();
      std::memcpy(b.data(), a.data(), a.size());  // there ...
      std::memcpy(a.data(), b.data(), b.size());  // ... and back
      if (i >= 2) mc.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    nlohmann::json row = {{"bytes", bytes}, {"reps", reps}};
    auto put = [&](const char* name, const std::vector<double>& v) {
      row[name] = {{"median_s", median(v)},
                   {"best_s", v.empty() ? 0.0 : *std::min_element(v.begin(), v.end())}};
    };
    put("memcpy_round_trip", mc);
    put("raw_zmq_inproc",
        raw_zmq_round_trips("inproc://tandem.overhead.raw." + std::to_string(bytes), bytes, reps));
    put("tandem_inproc", worker_round_trips("inproc://tandem.overhead.w." + std::to_string(bytes),
                                            std::nullopt, bytes, reps));
    put("raw_zmq_tcp", raw_zmq_round_trips("tcp://127.0.0.1:0", bytes, reps));
    put("tandem_tcp", worker_round_trips("tcp://127.0.0.1:0", std::nullopt, bytes, reps));
    if (key) put("tandem_tcp_curve", worker_round_trips("tcp://127.0.0.1:0", key, bytes, reps));
    put("direct_pipeline_run", direct_pipeline_per_packet(bytes, reps));
    std::printf("| %lld |", static_cast<long long>(bytes));
    for (const char* name : {"memcpy_round_trip", "raw_zmq_inproc", "tandem_inproc", "raw_zmq_tcp",
                             "tandem_tcp", "tandem_tcp_curve", "direct_pipeline_run"}) {
      if (row.contains(name))
        std::printf(" %.1f / %.1f |", 1e6 * row[name]["median_s"].get<double>(),
                    1e6 * row[name]["best_s"].get<double>());
      else
        std::printf(" n/a |");
    }
    std::printf("\n");
    std::fflush(stdout);
    rows.push_back(row);
  }
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"schema_version", 1},
                        {"what",
                         "per-packet round trip (coordinator -> identity stage -> coordinator): "
                         "median and best seconds"},
                        {"build", build_info_json()},
                        {"system", system_json()},
                        {"results", rows}};
    write_json(o.json_path, j);
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  CLI::App* sub = app.add_subcommand("pipeline", "Run pipeline plans over local and remote stages");
  sub->require_subcommand(1);
  auto o = std::make_shared<PipelineRunOptions>();
  CLI::App* run =
      sub->add_subcommand("run", "Run a plan; print utilisation, bubbles, measured vs predicted");
  run->add_option("--plan", o->plan, "Plan JSON (the pipeline plan contract)")
      ->required()
      ->check(CLI::ExistingFile);
  run->add_option("--cluster", o->cluster,
                  "ClusterSpec JSON (default: the plan's \"cluster\" when it is a file)");
  run->add_option("--workers", o->workers,
                  "DEVICE=ENDPOINT (tcp://host:port or local), repeatable or comma-separated")
      ->delimiter(',');
  run->add_option("--key", o->key, "Cluster CURVE key file for tcp:// workers");
  run->add_option("--requests", o->requests,
                  "Requests (default: the plan's micro_batches; an LLM plan's request holds "
                  "batch / micro_batches prompts)")
      ->check(CLI::Range(0, 1 << 20));
  run->add_option("--queue", o->queue, "Queue capacity between stages")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  run->add_flag("--direct", o->direct,
                "Local stages: call them directly instead of over inproc://");
  run->add_flag("--no-links", o->no_links, "Do not emulate the ClusterSpec's links");
  run->add_option("--topology", o->topology,
                  "w2w: each worker sends its stage's output to the next stage's worker; hub: "
                  "every activation goes through the coordinator (hops with an emulated link "
                  "always do)")
      ->check(CLI::IsMember({"w2w", "hub"}))
      ->capture_default_str();
  run->add_option("--jitter-ms", o->jitter_ms, "Emulated link jitter (uniform +-)")
      ->check(CLI::Range(0.0, 1e5));
  run->add_option("--drop", o->drop, "Emulated link drop probability")
      ->check(CLI::Range(0.0, 0.99));
  run->add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                  "Seconds of silence before a worker is declared lost")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  run->add_option("--configure-timeout", o->configure_timeout_s,
                  "Seconds a worker may take to build a stage (load its model)")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str();
  run->add_option("--timeout", o->run_timeout_s, "Seconds the whole run may take")
      ->check(CLI::Range(0.05, 86400.0))
      ->capture_default_str();
  run->add_option("--vocab", o->vocab,
                  "Token ids are drawn from [0, vocab) when the first stage embeds")
      ->check(CLI::Range(1, 1 << 30));
  run->add_option("--seed", o->seed, "Input seed")->capture_default_str();
  run->add_flag(
      "--last-only", o->last_only,
      "Packets carry meta \"last_only\": an LLM head returns logits of the last token only");
  run->add_flag("--verify", o->verify,
                "Also run in process and compare bit for bit: an LLM plan against the whole model "
                "on one device, other plans against their stages in sequence");
  run->add_option("--json", o->json_path, "Write the report as JSON");
  run->add_option("--replan-profile", o->replan_profile,
                  "LLM plans: when a worker is lost, re-split the layers over the survivors with "
                  "this HPipe model profile (default: move the lost stage whole)")
      ->check(CLI::ExistingFile);
  auto ov = std::make_shared<OverheadOptions>();
  CLI::App* over =
      sub->add_subcommand("overhead", "Per-packet runtime cost vs memcpy and raw ZeroMQ");
  over->add_option("--sizes", ov->sizes, "Message sizes in bytes")->delimiter(',');
  over->add_option("--reps", ov->reps, "Round trips per size (fewer for large sizes)")
      ->check(CLI::Range(1, 100000));
  over->add_option("--json", ov->json_path, "Write the results as JSON");
  return Command{sub,
                 [o, ov, run] { return run->parsed() ? run_pipeline(*o) : run_overhead(*ov); }};
});

}  // namespace
}  // namespace tandem::cli
