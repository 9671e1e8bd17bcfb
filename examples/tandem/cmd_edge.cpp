// SPDX-License-Identifier: Apache-2.0
// `tandem edge plan`: plans an ONNX CNN on an edge cluster with PICO, DeepZoning or a baseline
// (LW, EFL, OFL, PipeEdge, CoEdge, single device; spec cnn.md §3.1, §3.3, §4) and prints the plan
// (stages, devices, rows, predicted period/latency, redundancy, utilisation) as a table or JSON.
// `--system all` prints every system side by side. `tandem edge run` plans, then runs a stream of
// frames through the plan on the pipeline runtime (cnn.tiles stages; emulated devices and links in
// process, or `tandem worker`s) and prints the measured period and latency beside the prediction
// and the runtime simulator, the stage timelines and, with --verify, the comparison with the
// single-device run. `tandem edge compare` (edge_compare.cpp) sweeps systems x models x
// bandwidths, predicted and replayed. `tandem edge split` (edge_split.cpp) splits a CNN between an
// edge device and a cloud server (DECC, Neurosurgeon, DADS, edge-only, cloud-only).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>

#include "commands.h"
#include "edge_compare.h"
#include "edge_split.h"
#include "tandem/cnn/edge/measure.h"
#include "tandem/cnn/edge/planners.h"
#include "tandem/cnn/edge/replan.h"
#include "tandem/cnn/edge/simulate.h"
#include "tandem/cnn/executor.h"
#include "tandem/core/cluster.h"
#include "tandem/core/error.h"
#include "tandem/sched/pipeline.h"

namespace tandem::cli {
namespace {

struct EdgePlanOptions {
  std::string cluster;
  std::string model;
  std::string system = "pico";
  double lambda = 0;
  double latency_cap_s = 0;  // 0: none
  bool allow_idle = false;
  bool refine = false;
  std::string output = "md";
  std::string cost = "analytic";
  double mbps = 0;  // > 0: every link of the cluster set to this bandwidth
  // edge run
  int frames = 8;
  std::vector<std::string> workers;  // device=endpoint
  std::string key;
  bool verify = false;
  std::string json_path;
};

std::string row(const cnn::edge::EdgePlan& p, double single_period) {
  const cnn::edge::Metrics& m = p.metrics;
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "| %s | %zu | %.4f | %.4f | %.2f | %.2fx | %.2f%% | %.1f%% | %.2f | %.4f | %.4f |\n",
      p.system.c_str(), p.stages.size(), m.period_s, m.latency_s, m.throughput_fps,
      single_period / m.period_s, 100 * m.redundancy, 100 * m.mean_utilisation, m.bytes_moved / 1e6,
      m.medium_s, m.planner_s);
  return buf;
}

// What both subcommands plan over, loaded once. The chain points at the graph and the problem at
// the chain and the cost model, so this stays where it is built.
struct EdgeSetup {
  explicit EdgeSetup(const EdgePlanOptions& o)
      : cluster(load_cluster(o)),
        graph(cnn::edge::load_edge_graph(o.model)),
        chain(cnn::edge::linearise(graph)),
        cost(make_cost(o)),
        problem(cnn::edge::make_problem(chain, cluster, *cost)) {}
  EdgeSetup(const EdgeSetup&) = delete;
  EdgeSetup& operator=(const EdgeSetup&) = delete;
  ClusterSpec cluster;
  cnn::Graph graph;
  cnn::edge::Chain chain;
  // bench(): set before `cost` is built (make_cost may fill it), so declared before it.
  std::unique_ptr<cnn::edge::TileBench> bench_;
  std::unique_ptr<cnn::edge::EdgeCostModel> cost;
  cnn::edge::EdgeProblem problem;

  // The tiles timed on this host: built once, by the profiled cost model or on first use, so a
  // tile is never run twice (TileBench caches every timing).
  cnn::edge::TileBench& bench() {
    if (!bench_) bench_ = std::make_unique<cnn::edge::TileBench>(chain);
    return *bench_;
  }

 private:
  static ClusterSpec load_cluster(const EdgePlanOptions& o) {
    ClusterSpec c = ClusterSpec::from_json_file(o.cluster);
    if (o.mbps > 0)
      for (LinkProfile& l : c.links) l.bandwidth_bytes_per_s = o.mbps * 1e6 / 8;
    return c;
  }
  std::unique_ptr<cnn::edge::EdgeCostModel> make_cost(const EdgePlanOptions& o) {
    if (o.cost == "analytic") return std::make_unique<cnn::edge::AnalyticCostModel>();
    std::fprintf(stderr, "edge: profiling %d pieces on this host...\n", chain.size());
    return std::make_unique<cnn::edge::ProfiledCostModel>(chain,
                                                          cnn::edge::profile_pieces(bench()));
  }
};

cnn::edge::PlanOptions plan_options(const EdgePlanOptions& o) {
  cnn::edge::PlanOptions po{
      .lambda = o.lambda, .allow_idle_devices = o.allow_idle, .refine_mapping = o.refine};
  if (o.latency_cap_s > 0) po.latency_cap_s = o.latency_cap_s;
  return po;
}

void print_header(const EdgePlanOptions& o, const EdgeSetup& e) {
  std::printf("%s on %s: %d pieces, %.2f GFLOP; %zu devices, medium %.2f MB/s\n\n", o.model.c_str(),
              o.cluster.c_str(), e.chain.size(), e.chain.total_flops() * 1e-9,
              e.problem.devices.size(), e.problem.medium.bandwidth_bytes_per_s / 1e6);
}

int run_edge_plan(const EdgePlanOptions& o) {
  const EdgeSetup e(o);
  const cnn::edge::EdgeProblem& pb = e.problem;
  const cnn::edge::PlanOptions po = plan_options(o);
  if (o.system != "all") {
    const cnn::edge::EdgePlan plan = cnn::edge::plan_system(o.system, pb, po);
    if (o.output == "json") {
      nlohmann::json j = plan.to_json(pb);
      j["model"] = o.model;
      j["cluster"] = o.cluster;
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      print_header(o, e);
      std::printf("%s", cnn::edge::format_table(plan, pb).c_str());
    }
    return 0;
  }
  std::vector<cnn::edge::EdgePlan> plans;
  for (const std::string& s : cnn::edge::system_names())
    if (s != "apico" || o.lambda > 0) plans.push_back(cnn::edge::plan_system(s, pb, po));
  double single = 0;
  for (const auto& p : plans)
    if (p.system == "single") single = p.metrics.period_s;
  if (o.output == "json") {
    nlohmann::json j = {
        {"model", o.model}, {"cluster", o.cluster}, {"plans", nlohmann::json::array()}};
    for (const auto& p : plans) j["plans"].push_back(p.to_json(pb));
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  print_header(o, e);
  std::printf(
      "| system | stages | period s | latency s | frames/s | vs single | redundancy | "
      "utilisation | MB/frame | medium s | planner s |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& p : plans) std::printf("%s", row(p, single).c_str());
  return 0;
}

std::vector<sched::Request> frames(const Tensor& image, int n) {
  std::vector<sched::Request> reqs(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    reqs[i].id = static_cast<uint64_t>(i);
    reqs[i].micros.push_back(sched::Packet{});
    reqs[i].micros[0].tensors = {image};
  }
  return reqs;
}

// Max |a - b| / max |b|, and whether the bits are equal.
std::pair<double, bool> compare(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  const float* p = x.data<float>();
  const float* q = y.data<float>();
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(p[i] - q[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(q[i])));
  }
  const bool same = std::memcmp(p, q, static_cast<size_t>(y.nbytes())) == 0;
  return {scale > 0 ? diff / scale : diff, same};
}

int run_edge_run(const EdgePlanOptions& o) {
  if (o.system == "all") throw InvalidArgument("edge run: give one --system");
  EdgeSetup e(o);
  const cnn::edge::EdgeProblem& pb = e.problem;
  const cnn::Graph& g = e.graph;
  const ClusterSpec& cluster = e.cluster;
  const cnn::edge::EdgePlan plan = cnn::edge::plan_system(o.system, pb, plan_options(o));
  const sched::PipelinePlan runtime_plan =
      cnn::edge::to_pipeline_plan(plan, pb, o.model, o.cluster);
  const std::map<std::string, std::string> workers = worker_map(o.workers, "edge run");
  sched::PipelineOptions po;
  if (!o.key.empty()) po.key = sched::ClusterKey::load(o.key);
  po.shared_medium = true;  // the planners' model: one medium for every transfer (eq. 8)
  // A lost worker: the same system planned again over the devices left.
  po.replan_plan =
      cnn::edge::replan_over_survivors(o.system, pb, o.model, o.cluster, plan_options(o));
  const Tensor image = Tensor::from_vector(
      std::vector<float>(static_cast<size_t>(g.tensor(g.inputs()[0]).shape.numel()), 0.5f),
      g.tensor(g.inputs()[0]).shape, DType::kF32);
  std::fprintf(stderr, "edge run: %s plan of %zu stages, %d frames...\n", o.system.c_str(),
               runtime_plan.stages.size(), o.frames);
  sched::Pipeline pipe(runtime_plan, cluster, workers, po);
  // One frame first, untimed: stage set-up (model import, kernel choice, first-touch buffers) is
  // not what the plan predicts. Then one frame alone: its latency, from submission to delivery,
  // every transfer and stage included, nothing queued. Then the stream.
  pipe.run(frames(image, 1));
  const double latency = pipe.run(frames(image, 1)).makespan_s;
  const sched::RunReport r = pipe.run(frames(image, o.frames));
  // Steady state: a pipeline's makespan is one frame's latency plus a period per further frame.
  // (Gaps between frames leaving the last stage understate it: the shared medium is not fair, so
  // frames can bunch at the end.)
  const double period =
      o.frames > 1 ? std::max(0.0, r.makespan_s - latency) / static_cast<double>(o.frames - 1)
                   : r.makespan_s;
  // Eq. 9 charges a stage its transfers on top of its compute; the runtime overlaps one frame's
  // transfers with another's compute, so its period can reach down to the busiest resource: a
  // device's compute or the shared medium's transfers per frame.
  double bound = plan.metrics.medium_s;
  for (const auto& d : plan.metrics.devices) bound = std::max(bound, d.busy_s);
  // What a stage spends besides its devices' compute (split, member transfers, stitch, transport
  // to and from the workers), per frame, summed over the stages: the runtime's overhead (with the
  // emulated member transfers in it unless the links are fast, --mbps).
  double compute = 0, around = 0;
  for (const auto& t : r.timelines)
    if (t.kind == "stage")
      for (const auto& iv : t.intervals) {
        compute += iv.compute_s;
        around += std::max(0.0, iv.end_s - iv.start_s - iv.compute_s);
      }
  compute /= o.frames;
  around /= o.frames;
  // The runtime's own schedule (simulate.h) with the plan's compute predictions, and with every
  // share's tile timed on this host (the simulator's error against this run, without the cost
  // model's).
  const cnn::edge::RuntimeSimOptions so{.frames = std::max(2, o.frames), .shared_medium = true};
  const cnn::edge::RuntimeSim sim = cnn::edge::simulate_runtime(plan, pb, so);
  const cnn::edge::TimedCostModel timed(e.bench());
  cnn::edge::EdgeProblem timed_pb = pb;
  timed_pb.cost = &timed;
  const cnn::edge::RuntimeSim sim_timed = cnn::edge::simulate_runtime(plan, timed_pb, so);
  nlohmann::json j = r.to_json();
  j["system"] = o.system;
  j["frames"] = o.frames;
  j["measured"] = {{"period_s", period}, {"latency_s", latency}, {"makespan_s", r.makespan_s}};
  j["predicted_period_bound_s"] = bound;
  j["per_frame"] = {{"compute_s", compute}, {"stage_overhead_s", around}};
  j["simulated"] = {{"period_s", sim.period_s}, {"latency_s", sim.latency_s}};
  j["simulated_timed"] = {{"period_s", sim_timed.period_s}, {"latency_s", sim_timed.latency_s}};
  j["predicted"] = runtime_plan.predicted.to_json();
  const double pred = plan.metrics.period_s;
  std::printf("%s on %s, %s: %d frames in %.3f s\n", o.model.c_str(), o.cluster.c_str(),
              o.system.c_str(), o.frames, r.makespan_s);
  for (const std::string& e : r.events) std::printf("event: %s\n", e.c_str());
  std::printf("| timeline | device | packets | busy s | utilisation |\n|---|---|---|---|---|\n");
  for (const auto& t : j["timelines"])
    std::printf("| %s | %s | %d | %.4f | %.1f%% |\n", t["name"].get<std::string>().c_str(),
                t["device"].get<std::string>().c_str(), t["packets"].get<int>(),
                t["busy_s"].get<double>(), 100 * t["utilisation"].get<double>());
  std::printf("per frame: %.4f s compute, %.4f s in the stages around it (%.1f%% of compute)\n",
              compute, around, compute > 0 ? 100 * around / compute : 0.0);
  auto err = [](double model, double meas) { return meas > 0 ? 100 * (model - meas) / meas : 0.0; };
  std::printf(
      "runtime simulator: period %.4f s (%+.1f%%), latency %.4f s (%+.1f%%) with the cost model; "
      "period %.4f s (%+.1f%%), latency %.4f s (%+.1f%%) with every tile timed here\n",
      sim.period_s, err(sim.period_s, period), sim.latency_s, err(sim.latency_s, latency),
      sim_timed.period_s, err(sim_timed.period_s, period), sim_timed.latency_s,
      err(sim_timed.latency_s, latency));
  const double pred_latency = plan.metrics.latency_s;
  std::printf(
      "measured period %.4f s, predicted %.4f s (eq. 9): error %+.1f%% (resource bound %.4f s); "
      "one frame's latency %.4f s, predicted %.4f s: error %+.1f%%\n",
      period, pred, pred > 0 ? 100 * (period - pred) / pred : 0.0, bound, latency, pred_latency,
      pred_latency > 0 ? 100 * (latency - pred_latency) / pred_latency : 0.0);
  if (o.verify) {
    const Tensor want = cnn::Executor(g, {.winograd = false}).run({image}).at(0);
    int exact = 0;
    double worst = 0;
    for (const auto& [id, out] : r.outputs) {
      const auto [err, same] = compare(out.at(0).tensors.at(0), want);
      exact += same;
      worst = std::max(worst, err);
    }
    j["verify"] = {{"bit_exact", exact}, {"outputs", r.outputs.size()}, {"max_rel_error", worst}};
    std::printf("verify: %d of %zu outputs bit-exact with the single-device run, max error %.2g\n",
                exact, r.outputs.size(), worst);
  }
  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) throw IoError("edge run: cannot write '" + o.json_path + "'");
  }
  return 0;
}

void add_plan_options(CLI::App* sub, EdgePlanOptions& o) {
  sub->add_option("--cluster", o.cluster, "ClusterSpec JSON (e.g. configs/clusters/pico-8.json)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-m,--model", o.model, "ONNX CNN with one input and one output")
      ->required()
      ->check(CLI::ExistingFile);
  std::vector<std::string> systems = cnn::edge::system_names();
  systems.push_back("all");
  sub->add_option("--system", o.system,
                  "pico, apico (pipeline or fused by M/D/1 latency at --lambda), lw, efl, ofl, "
                  "pipeedge, single, deepzoning (latency), deepzoning-tp (throughput), coedge, or "
                  "all (a comparison table; plan only)")
      ->check(CLI::IsMember(systems))
      ->capture_default_str();
  sub->add_option("--lambda", o.lambda, "Poisson frame rate (frames/s) for the mean latency")
      ->check(number_in(0, 1e9));
  sub->add_option("--latency-cap", o.latency_cap_s, "PICO's T_lim in seconds (0: none)")
      ->check(number_in(0, 1e9));
  sub->add_option("--cost", o.cost,
                  "Cost model: analytic (PICO eq. 5, alpha 1: the cluster file alone) or profiled "
                  "(every piece timed on this host first, carried to each device by its speed "
                  "factor: predictions within a few % of the engine)")
      ->check(CLI::IsMember({"analytic", "profiled"}))
      ->capture_default_str();
  sub->add_option("--mbps", o.mbps, "Set every link of the cluster to this bandwidth (Mbit/s)")
      ->check(number_in(1e-3, 1e9));
  sub->add_flag("--allow-idle", o.allow_idle,
                "PICO: let the DP leave devices idle (the paper uses all of them)");
  sub->add_flag("--refine", o.refine,
                "PICO: local search over the device mapping after the paper's greedy step "
                "(not in the paper)");
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<EdgePlanOptions>();
  CLI::App* edge = app.add_subcommand(
      "edge",
      "CNN inference on an edge cluster (PICO, DeepZoning and baselines) or split between an edge "
      "device and a cloud (DECC and baselines: `edge split`)");
  edge->require_subcommand(1);
  CLI::App* plan = edge->add_subcommand("plan",
                                        "Plan a CNN on a cluster (PICO, DeepZoning, CoEdge, LW, "
                                        "EFL, OFL, PipeEdge, single) and print it");
  add_plan_options(plan, *o);
  plan->add_option("-o,--output", o->output, "md or json")->check(CLI::IsMember({"md", "json"}));
  CLI::App* run = edge->add_subcommand(
      "run", "Plan, then run frames through the plan on the pipeline runtime (cnn.tiles stages)");
  add_plan_options(run, *o);
  run->add_option("--frames", o->frames, "Frames to stream through the pipeline")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  run->add_option("--workers", o->workers,
                  "DEVICE=ENDPOINT (tcp://host:port of a `tandem worker`), repeatable or "
                  "comma-separated; other devices run in process, emulated")
      ->delimiter(',');
  run->add_option("--key", o->key, "Cluster CURVE key file for tcp:// workers");
  run->add_flag("--verify", o->verify, "Compare every output with the single-device run");
  run->add_option("--json", o->json_path, "Write the report as JSON");
  auto compare_fn = std::make_shared<std::function<int()>>();
  CLI::App* compare = add_edge_compare(edge, *compare_fn);
  auto split_fn = std::make_shared<std::function<int()>>();
  CLI::App* split = add_edge_split(edge, *split_fn);
  return Command{edge, [o, run, compare, compare_fn, split, split_fn] {
                   if (*compare) return (*compare_fn)();
                   if (*split) return (*split_fn)();
                   return *run ? run_edge_run(*o) : run_edge_plan(*o);
                 }};
});

}  // namespace
}  // namespace tandem::cli
