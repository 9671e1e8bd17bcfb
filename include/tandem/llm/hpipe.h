// SPDX-License-Identifier: Apache-2.0
// HPipe: pipelined prefill of long prompts over a chain of heterogeneous devices (Ma et al.,
// "HPipe: Large Language Model Pipeline Parallelism for Long Context on Heterogeneous
// Cost-effective Devices", NAACL 2024 Industry; spec llm.md 2.1), beside its baselines
// (llm.md 3.1).
//
// Planning (offline, no hardware needed): from a ModelProfile (hpipe_profile.h) and a ClusterSpec
// whose devices are taken in their listed order,
//   DP 1  splits the n layers over the N devices minimising the slowest stage,
//           A[b][m] = min_k max(A[k][m-1], T(k+1..b, m)),
//         where T is the stage's compute for the whole prompt plus its outgoing transfer, and is
//         infinite when the stage's weights + KV for the prompt + activations exceed the device's
//         mem_bytes (so a device never gets layers it cannot hold; Infeasible names the device
//         and the bytes when no split fits);
//   DP 2  cuts the prompt into token slices on a granularity-g grid: for each candidate t_max
//         (distinct achievable bottleneck slice costs, subsampled), F[p] = min_s F[p-s] + cost(s,
//         p-s) over slices with cost <= t_max, total = F[L] + (N-1) t_max; the least total wins.
//         cost(s, c) is the bottleneck stage's time for s tokens after c (compute + send).
// Baselines in the same code: "base" (even split, the whole batch as one packet, no overlap),
// "gpipe" (even split, the batch cut into micro-batches of one request), "gp-b" (GPipe on DP 1's
// split), "terapipe" (even split + DP 2 with one homogeneous cost model: every device at the
// cluster's mean speed), "uniform-K" (DP 1's split, K equal slices; the slicing ablation) and
// "hpipe" (DP 1 + DP 2). Every plan's latency is predicted by the discrete-event simulator
// (sched/simulator.h) over per-packet, per-stage cost-model times; throughput = batch * L /
// latency, energy = sum of device power_w * busy seconds (dynamic energy).
//
//   auto prof = hpipe::ModelProfile::load("smollm2.hpipe.json");
//   auto cluster = ClusterSpec::from_json_file("configs/clusters/hpipe-testbed.json");
//   sched::PipelinePlan plan = hpipe::make_plan(prof, cluster, "hpipe-testbed", 2048, "hpipe", {});
//   plan.save("plan.json");
//
// Plans are the runtime's one plan type (sched/plan.h): one-device stages of kind "llm.layers"
// (layer_stage.cpp) with the model path and sha256, slices, micro_batches, batch (requests in the
// measured batch), an extra "cuts" and predicted.energy_j; throughput counts tokens. The planners
// are registered ("hpipe", "gpipe", "gp-b", "terapipe", "base", "uniform"; sched/planner.h).
// Departures: units are whole decoder layers (embedding and head ride on the first and last
// stage); the paper's batch-dimension DP is not done. Thread-safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/core/cluster.h"
#include "tandem/export.h"
#include "tandem/llm/hpipe_profile.h"
#include "tandem/sched/plan.h"
#include "tandem/sched/simulator.h"

namespace tandem::llm::hpipe {

struct PlanOptions {
  int granularity = 8;      // g: slice lengths are multiples of it (the last may be shorter)
  int batch = 1;            // b: requests of prompt_len tokens prefilled together
  int max_candidates = 48;  // t_max candidates tried by DP 2 (subsampled evenly)
  int max_grid = 256;       // at most this many grid points: g grows for long prompts
};

// One "llm.layers" stage, typed: what the planners build and layer_stages() reads back.
struct StagePlan {
  std::string device;
  int first_layer = 0, last_layer = 0;  // [first, last)
  bool embed = false, head = false;
};

inline constexpr int kMaxBatch = 4096;  // requests prefilled together

// The layer stages of a plan, checked as an HPipe plan: every stage a one-device "llm.layers"
// stage of one model (path and sha256), the layers contiguous from 0, embed on the first stage
// and head on the last; slices present and summing to prompt_len; batch (absent: micro_batches)
// at most kMaxBatch and a multiple of micro_batches; an "extra" "cuts" equal to the stages'
// boundaries. ParseError naming `where` and the field otherwise.
struct TANDEM_API LayerStages {
  std::string model_path, sha256;
  std::vector<StagePlan> stages;
  std::vector<int> cuts() const;  // c_0 = 0 < c_1 < ... < c_N = n
};
TANDEM_API LayerStages layer_stages(const sched::PipelinePlan& plan,
                                    const std::string& where = "plan");

// The "llm.layers" config of one stage (stage.h's make_stage reads it).
TANDEM_API nlohmann::json layer_stage_config(const std::string& model_path,
                                             const std::string& sha256, const StagePlan& stage);
// A plan of these stages; "cuts" is written beside them for people.
TANDEM_API sched::PipelinePlan layer_plan(const std::string& model_path, const std::string& sha256,
                                          const std::vector<StagePlan>& stages);

// A plan `tandem pipeline run` reads, completed and checked: absent slices become one slice of
// prompt_len (or prompt_len the slices' sum), an absent sha256 is not checked, then layer_stages()
// applies and, when the GGUF file is readable here, the stages must run layers [0, n_layers) of
// its model exactly once. ParseError naming `where` otherwise. (A worker's stage refuses a head
// that does not end at the last layer, so a coordinator without the file is covered too.)
TANDEM_API sched::PipelinePlan layer_plan_for_run(const sched::PipelinePlan& plan,
                                                  const std::string& where);
// The same model and slices as one stage on the first stage's device: the independent
// single-device run that `pipeline run --verify` compares a split plan against.
TANDEM_API sched::PipelinePlan single_device_plan(const sched::PipelinePlan& plan);

// Seconds one stage takes for s tokens after c cached ones on its device (compute only).
TANDEM_API double stage_compute_s(const ModelProfile& prof, const DeviceProfile& dev,
                                  const StagePlan& stage, double s, double c);
// Bytes a stage needs on its device for `tokens` cached tokens (weights, KV, activations).
TANDEM_API double stage_memory_bytes(const ModelProfile& prof, int first_layer, int last_layer,
                                     bool embed, bool head, double tokens);

// DP 1: cut points (size N+1) over the devices in order. Infeasible when no split fits in memory.
TANDEM_API std::vector<int> partition_layers(const ModelProfile& prof, const ClusterSpec& cluster,
                                             int prompt_len, int batch);
// n layers over N devices as evenly as possible (earlier devices take the remainder);
// Infeasible naming the device when a stage does not fit its memory.
TANDEM_API std::vector<int> even_split(const ModelProfile& prof, const ClusterSpec& cluster,
                                       int prompt_len, int batch);
// DP 2 over the given stages; `speed_override` > 0 prices every device at that speed factor
// (TeraPipe's homogeneous model).
TANDEM_API std::vector<int> slice_tokens(const ModelProfile& prof, const ClusterSpec& cluster,
                                         const std::vector<StagePlan>& stages, int prompt_len,
                                         const PlanOptions& options, double speed_override = 0);
// K equal slices (the first prompt_len % K one token longer).
TANDEM_API std::vector<int> uniform_slices(int prompt_len, int k);

// The simulator input of a plan priced by the cost model: packets in the order the first stage
// receives them (request-major, then slice; GPipe: one packet per micro-batch).
TANDEM_API sched::PipelineSimInput predicted_sim_input(const sched::PipelinePlan& plan,
                                                       const ModelProfile& prof,
                                                       const ClusterSpec& cluster);
// Fills plan.predicted from the simulator (source "cost-model+simulator").
TANDEM_API void predict(sched::PipelinePlan& plan, const ModelProfile& prof,
                        const ClusterSpec& cluster);

// Plans `system` (see above; "uniform-K" with 1 <= K <= 128). InvalidArgument for an unknown
// system, a prompt length < 1 or past the model's profile, fewer layers than devices.
TANDEM_API sched::PipelinePlan make_plan(const ModelProfile& prof, const ClusterSpec& cluster,
                                         const std::string& cluster_name, int prompt_len,
                                         const std::string& system, const PlanOptions& options);

}  // namespace tandem::llm::hpipe
