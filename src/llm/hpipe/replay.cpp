// SPDX-License-Identifier: Apache-2.0
// replay_plan (hpipe_replay.h): in-process, sequential run of a plan's stages over its slices,
// timed per stage x slice, then scheduled by the simulator.
#include <algorithm>
#include <chrono>
#include <limits>

#include "core/clock.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/hpipe_replay.h"
#include "tandem/sched/emulation.h"
#include "tandem/sched/stage.h"

namespace tandem::llm::hpipe {

nlohmann::json ReplayResult::to_json() const {
  return {{"measured_latency_s", measured.makespan_s},
          {"predicted_latency_s", predicted.makespan_s},
          {"stage_measured_s", stage_measured_s},
          {"stage_predicted_s", stage_predicted_s},
          {"measured_device_busy_s", measured.device_busy_s},
          {"packets", measured_s.size()},
          {"wall_s", wall_s}};
}

ReplayResult replay_plan(const sched::PipelinePlan& plan, const ClusterSpec& cluster,
                         const ModelProfile& profile, std::span<const int32_t> prompt,
                         const ReplayOptions& options) {
  if (static_cast<int>(prompt.size()) != plan.prompt_len) {
    throw InvalidArgument(
        cat("replay_plan: prompt of ", prompt.size(), " tokens for a plan of ", plan.prompt_len));
  }
  if (options.threads < 1 || options.measured_requests < 1) {
    throw InvalidArgument("replay_plan: threads and measured_requests must be >= 1");
  }
  const LayerStages ls = layer_stages(plan, "replay_plan");
  const size_t ns = ls.stages.size();
  // Each stage runs on its emulated device (the runtime's; its speed factor stretches the time),
  // timed without sleeping: the simulator schedules the measured times.
  // (options.threads, set below for the whole replay, stands for every device's thread budget).
  std::vector<sched::EmulatedDevice> devices;
  for (const StagePlan& s : ls.stages) {
    devices.push_back(sched::EmulatedDevice::from_profile(cluster.device(s.device)));
    devices.back().threads = 0;
  }
  std::vector<std::unique_ptr<sched::Stage>> stages;
  for (const sched::PlanStage& s : plan.stages) stages.push_back(sched::make_stage(s.stage));

  const int saved = cpu_num_threads();
  set_cpu_num_threads(options.threads);
  struct Restore {
    int n;
    ~Restore() { set_cpu_num_threads(n); }
  } restore{saved};

  ReplayResult r;
  const double wall0 = monotonic_s();
  const size_t n_slices = plan.slices.size();
  // per_request[i][j]: seconds of slice i on stage j for one request (least over measured ones).
  std::vector<std::vector<double>> per_request(
      n_slices, std::vector<double>(ns, std::numeric_limits<double>::infinity()));
  for (int req = 0; req < options.measured_requests; ++req) {
    int pos = 0;
    for (size_t i = 0; i < n_slices; ++i) {
      sched::Packet p;
      p.request_id = static_cast<uint64_t>(req);
      p.micro = static_cast<int32_t>(i);
      p.n_micro = static_cast<int32_t>(n_slices);
      p.meta = {{"pos_start", pos},
                {"seq", i},
                {"last_only", true}};  // prefill: no logits but the last row
      p.tensors.push_back(Tensor::from_vector(
          std::vector<int32_t>(prompt.begin() + pos, prompt.begin() + pos + plan.slices[i]),
          {plan.slices[i]}, DType::kI32));
      for (size_t j = 0; j < ns; ++j) {
        double t = 0;
        p = devices[j].measure(*stages[j], std::move(p), &t);
        per_request[i][j] = std::min(per_request[i][j], t);
      }
      if (i + 1 == n_slices && req + 1 == options.measured_requests) r.last_logits = p.tensors[0];
      pos += plan.slices[i];
    }
    for (auto& s : stages) s->reset(static_cast<uint64_t>(req));
  }
  r.wall_s = monotonic_s() - wall0;

  sched::PipelineSimInput pred = predicted_sim_input(plan, profile, cluster);
  sched::PipelineSimInput meas = pred;
  const int64_t batch = plan.batch > 0 ? plan.batch : plan.micro_batches;
  const double per_packet = double(batch) / double(plan.micro_batches);
  for (size_t p = 0; p < meas.compute_s.size(); ++p) {
    for (size_t j = 0; j < ns; ++j)
      meas.compute_s[p][j] = per_packet * per_request[p % n_slices][j];
  }
  r.measured_s = meas.compute_s;
  r.predicted_s = pred.compute_s;
  r.transfer_s = pred.transfer_s;
  r.measured = sched::simulate_pipeline(meas);
  r.predicted = sched::simulate_pipeline(pred);
  r.stage_measured_s.assign(ns, 0.0);
  r.stage_predicted_s.assign(ns, 0.0);
  for (size_t p = 0; p < meas.compute_s.size(); ++p) {
    for (size_t j = 0; j < ns; ++j) {
      r.stage_measured_s[j] += r.measured_s[p][j];
      r.stage_predicted_s[j] += r.predicted_s[p][j];
    }
  }
  return r;
}

}  // namespace tandem::llm::hpipe
