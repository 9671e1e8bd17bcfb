// SPDX-License-Identifier: Apache-2.0
// `tandem rec-tune --deeprecsched` (rec_deeprecsched.h).
#include "rec_deeprecsched.h"

#include <cstdio>

#include "commands.h"
#include "tandem/core/build_info.h"
#include "tandem/core/cluster.h"
#include "tandem/core/error.h"
#include "tandem/recsys/sim_executor.h"

namespace tandem::cli {

void add_deeprecsched_options(CLI::App* sub, DeepRecSchedCli& o) {
  sub->add_flag("--deeprecsched", o.enabled,
                "Tune DeepRecSched's sub-batch b* and offload threshold theta* against the static "
                "configuration (B6) instead of the stream configuration");
  sub->add_option("--cpu-device", o.cpu_device,
                  "deeprecsched: the CPU path, a simulated device on the accelerator's clock")
      ->capture_default_str();
  sub->add_option("--cpu-profile", o.cpu_profile,
                  "deeprecsched: the CPU path as a DeviceProfile JSON (as `tandem profile` writes "
                  "it) instead of --cpu-device")
      ->check(CLI::ExistingFile);
  sub->add_option("--engines", o.engines, "deeprecsched: CPU streams (inference engines)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--accel-policy", o.accel_policy, "deeprecsched: the accelerator's policy")
      ->check(CLI::IsMember(rec::policy_names()))
      ->capture_default_str();
  sub->add_flag("--offload,!--no-offload", o.offload,
                "deeprecsched: also climb the offload thresholds")
      ->capture_default_str();
  rec::HillClimbOptions& h = o.hill;
  sub->add_option("--target-p95-ms", h.target_p95_ms, "deeprecsched: p95 latency target")
      ->check(number_in(1e-3, 1e6))
      ->capture_default_str();
  sub->add_option("--stable-region", h.stable_region,
                  "deeprecsched: raise the rate while p95 < target / (1 + this)")
      ->check(number_in(0.0, 10.0))
      ->capture_default_str();
  sub->add_option("--req-granularity", h.req_granularity,
                  "deeprecsched: responses per p95 and per rate update")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--sched-timeout", h.sched_timeout,
                  "deeprecsched: rate updates per configuration")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  sub->add_option("--arr-steps", h.arr_steps,
                  "deeprecsched: rate grid points per decade, and rates in the median")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  sub->add_option("--start-qps", h.start_qps, "deeprecsched: the first configuration's rate")
      ->check(number_in(1e-3, rec::kMaxOpenLoopRateQps))
      ->capture_default_str();
  sub->add_option("--batch-configs", h.batch_configs, "deeprecsched: sub-batch sizes, in order")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  sub->add_option("--thresholds", h.thresholds, "deeprecsched: offload thresholds, in order")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
}

int run_deeprecsched(const rec::RecModel& model,
                     const std::vector<std::shared_ptr<const rec::QueryInputs>>& pool,
                     const DeepRecSchedCli& o, const std::string& device,
                     const rec::SimOptions& sim, const std::string& output, nlohmann::json params) {
  using namespace tandem::rec;
  HillClimbOptions hill = o.hill;
  hill.seed = sim.seed;
  const SimDevice accel_dev = sim_device_from_flag(device);
  const SimDevice cpu_dev = o.cpu_profile.empty()
                                ? sim_device_from_flag(o.cpu_device)
                                : sim_cpu_device(DeviceProfile::from_json_file(o.cpu_profile));
  const std::string cpu_name = o.cpu_profile.empty() ? o.cpu_device : o.cpu_profile;
  PolicyOptions cpu_po{.policy = "stream-pool", .streams = o.engines};
  PolicyOptions accel_po{.policy = o.accel_policy};
  auto run = [&](const SplitOffload& c, double start_qps) {
    SimExecutor accel(accel_dev, sim);
    SimOptions cpu_sim = sim;
    ++cpu_sim.seed;
    SimExecutor cpu(cpu_dev, cpu_sim, accel);
    AchievableQps r;
    {
      auto policy = make_split_offload(model, cpu, cpu_po, &accel, accel_po, c);
      r = achievable_qps(*policy, accel, pool, hill, start_qps);
      std::fprintf(stderr, "rec-tune: %s achievable %.1f QPS (%s)\n", c.name().c_str(), r.qps,
                   policy->stats().dump().c_str());
    }
    return r;
  };
  const DeepRecSchedTuning t = tune_deeprecsched(run, hill, o.offload);
  params["cpu_device"] = cpu_name;
  params["cpu_sim_device"] = cpu_dev.to_json();
  params["accel_sim_device"] = accel_dev.to_json();
  params["engines"] = o.engines;
  params["accel_policy"] = o.accel_policy;
  params["target_p95_ms"] = hill.target_p95_ms;
  params["stable_region"] = hill.stable_region;
  params["req_granularity"] = hill.req_granularity;
  params["sched_timeout"] = hill.sched_timeout;
  params["arr_steps"] = hill.arr_steps;
  params["start_qps"] = hill.start_qps;
  const auto& best = t.tried[t.best];
  const double static_qps = t.tried.front().result.qps;
  if (output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"build", build_info_json()},
                        {"params", params},
                        {"deeprecsched", t.to_json()}};
    j["deeprecsched"]["speedup_vs_static"] = static_qps > 0 ? best.result.qps / static_qps : 0.0;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("| config | b* | theta* | achievable QPS (p95 <= %g ms) | last p95 ms | dropped |\n",
              hill.target_p95_ms);
  std::printf("|---|---|---|---|---|---|\n");
  for (const auto& tr : t.tried)
    std::printf("| %s | %s | %s | %.1f | %.2f | %lld |\n", tr.config.name().c_str(),
                tr.config.sub_batch ? cat(tr.config.sub_batch).c_str() : "-",
                tr.config.offload_threshold ? cat(tr.config.offload_threshold).c_str() : "-",
                tr.result.qps, tr.result.p95_ms.empty() ? 0.0 : tr.result.p95_ms.back(),
                static_cast<long long>(tr.result.dropped));
  std::printf("\n%s on %s + %s: tuned %s %.1f QPS vs static (B6) %.1f QPS (%.2fx), %zu configs\n",
              params.value("model", "").c_str(), cpu_name.c_str(), device.c_str(),
              best.config.name().c_str(), best.result.qps, static_qps,
              static_qps > 0 ? best.result.qps / static_qps : 0.0, t.tried.size());
  return 0;
}

}  // namespace tandem::cli
