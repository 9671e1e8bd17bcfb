// SPDX-License-Identifier: Apache-2.0
// `tandem hpipe`: HPipe planning and measurement (include/tandem/llm/hpipe.h).
//   profile   measure a model's per-layer time on this CPU and write the fitted profile
//   plan      plan one system for a cluster and prompt length; writes the plan JSON (the contract
//             the pipeline runtime reads)
//   simulate  the simulator's schedule of a plan: latency, throughput, per-stage busy and bubbles
//   compare   every system x prompt length on a cluster: predicted, and measured by the in-process
//             replay (hpipe_replay.h) where asked; ratios vs GPipe and Base
//   scale     simulator predictions for generated clusters of 8..64 devices
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "model_path.h"
#include "report.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/llm/hpipe.h"
#include "tandem/llm/hpipe_replay.h"
#include "tandem/llm/model.h"
#include "tandem/llm/synthetic_model.h"

namespace tandem::cli {
namespace {

using llm::hpipe::ModelProfile;
using sched::PipelinePlan;

struct HpipeOptions {
  std::string model;      // GGUF path (empty: SmolLM2 default)
  std::string synthetic;  // preset name: write a generated model of that shape
  int synthetic_layers = 2;
  std::string profile_path;
  std::string cluster_path;
  std::string plan_path;
  std::string out;
  std::string system = "hpipe";
  std::string systems = "base,gpipe,gp-b,terapipe,uniform-4,uniform-16,uniform-64,hpipe";
  std::string prompt_lens = "512,1024,2048,4096,8192";
  std::string replay_systems;  // systems the compare replays (empty: none)
  std::string device_counts = "8,16,32,64";
  std::string slice_grid = "8,16,32,64,128,256,512";
  std::string context_grid = "512,2048";
  int prompt_len = 2048;
  int batch = 1;
  int n_layers = 0;  // plan as if the model had this many layers of the profiled shape
  int threads = 1;
  int replay_max_len = 2048;
  int replay_repeats = 1;
  double mem_scale = 1.0;
  bool quick = false;
  bool no_progress = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::vector<int> int_list(const std::string& s, const char* what) {
  std::vector<int> out;
  for (const std::string& v : split_list(s)) {
    try {
      size_t used = 0;
      const int x = std::stoi(v, &used);
      if (used != v.size() || x < 1) throw std::invalid_argument(v);
      out.push_back(x);
    } catch (const std::exception&) {
      throw InvalidArgument(cat(what, ": '", v, "' is not a positive integer"));
    }
  }
  if (out.empty()) throw InvalidArgument(cat(what, ": empty list"));
  return out;
}

// The model file: -m, a generated synthetic model, or the SmolLM2 default.
std::string model_path(const HpipeOptions& o) {
  if (o.synthetic.empty()) return resolve_model_path(o.model, !o.no_progress);
  llm::SyntheticLlamaConfig c = llm::synthetic_preset(o.synthetic);
  c.n_layers = o.synthetic_layers;
  const std::string path = o.model.empty()
                               ? (std::filesystem::temp_directory_path() /
                                  cat("tandem-synthetic-", o.synthetic, "-", c.n_layers, "l.gguf"))
                                     .string()
                               : o.model;
  if (!std::filesystem::exists(path)) llm::write_synthetic_llama(c, path);
  return path;
}

ModelProfile measure_profile(const HpipeOptions& o) {
  const std::string path = model_path(o);
  const llm::Model model = llm::Model::load(path);
  llm::hpipe::ProfileOptions po;
  po.threads = o.threads;
  po.slice_lengths = int_list(o.slice_grid, "--slice-grid");
  po.context_lengths = int_list(o.context_grid, "--context-grid");
  const bool wide = model.config().d_model >= 2048;
  if (o.quick || wide) {  // 7B-wide layers: fewer, shorter points
    po.slice_lengths = {8, 32, 128};
    po.context_lengths = {256, 1024};
    po.repeats = wide ? 1 : 2;
  }
  std::cerr << "hpipe: profiling " << path << " on " << o.threads << " thread(s)...\n";
  return llm::hpipe::profile_model(model, path, po);
}

ModelProfile load_or_measure(const HpipeOptions& o) {
  ModelProfile p = o.profile_path.empty() ? measure_profile(o) : ModelProfile::load(o.profile_path);
  if (o.n_layers > 0) p.n_layers = o.n_layers;
  return p;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  if (!out) throw IoError(cat("cannot write '", path, "'"));
  out << j.dump(2) << "\n";
}

void print_plan(const PipelinePlan& plan) {
  const llm::hpipe::LayerStages ls = llm::hpipe::layer_stages(plan);
  std::printf("system %s, prompt %lld x batch %lld, %zu slices, %zu stages\n", plan.system.c_str(),
              static_cast<long long>(plan.prompt_len), static_cast<long long>(plan.batch),
              plan.slices.size(), plan.stages.size());
  std::printf("| stage | device | layers | busy s | bubble |\n|---|---|---|---|---|\n");
  for (size_t j = 0; j < ls.stages.size(); ++j) {
    const auto& s = ls.stages[j];
    const double busy = plan.predicted.per_stage_busy_s.at(j);
    std::printf("| %zu | %s | [%d, %d) | %.4f | %.1f%% |\n", j, s.device.c_str(), s.first_layer,
                s.last_layer, busy, 100.0 * (1.0 - busy / plan.predicted.latency_s));
  }
  std::string sl;
  for (size_t i = 0; i < plan.slices.size() && i < 40; ++i) sl += cat(i ? "," : "", plan.slices[i]);
  if (plan.slices.size() > 40) sl += ",...";
  std::printf(
      "slices: %s\npredicted latency %.4f s, throughput %.1f tokens/s, energy %.1f J (%s)\n",
      sl.c_str(), plan.predicted.latency_s, plan.predicted.throughput_per_s,
      plan.predicted.energy_j, plan.predicted.source.c_str());
}

std::vector<int32_t> random_prompt(int n, int64_t vocab) {
  std::mt19937 rng(42);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return ids;
}

int run_profile_cmd(const HpipeOptions& o) {
  const ModelProfile p = measure_profile(o);
  std::printf(
      "model %s: %d layers, d %d; one layer: %.3g s at s=128 c=0, %.3g s at s=128 "
      "c=2048; head row %.3g s; fit error %.1f%%\n",
      p.model_name.c_str(), p.n_layers, p.d_model, p.layer.predict_s(128, 0),
      p.layer.predict_s(128, 2048), p.head_row_s, 100 * p.fit_mean_rel_error);
  if (!o.out.empty()) p.save(o.out);
  return 0;
}

int run_plan_cmd(const HpipeOptions& o) {
  const ClusterSpec cl = ClusterSpec::from_json_file(o.cluster_path);
  const ModelProfile p = load_or_measure(o);
  const PipelinePlan plan =
      llm::hpipe::make_plan(p, cl, o.cluster_path, o.prompt_len, o.system, {.batch = o.batch});
  print_plan(plan);
  if (!o.out.empty()) plan.save(o.out);
  return 0;
}

int run_simulate_cmd(const HpipeOptions& o) {
  const ClusterSpec cl = ClusterSpec::from_json_file(o.cluster_path);
  PipelinePlan plan = PipelinePlan::from_json_file(o.plan_path);
  HpipeOptions mo = o;
  if (mo.model.empty() && mo.synthetic.empty())
    mo.model = llm::hpipe::layer_stages(plan, o.plan_path).model_path;
  const ModelProfile p = load_or_measure(mo);
  for (const auto& d : plan.devices()) {
    if (!cl.has_device(d))
      throw InvalidArgument(cat(o.plan_path, ": device '", d, "' is not in ", o.cluster_path));
  }
  llm::hpipe::predict(plan, p, cl);
  print_plan(plan);
  if (!o.out.empty()) write_json(o.out, plan.to_json());
  return 0;
}

nlohmann::json compare_one(const ModelProfile& p, const ClusterSpec& cl, const HpipeOptions& o,
                           const std::string& cluster_name, int len, const std::string& sys,
                           bool replay) {
  nlohmann::json row = {
      {"cluster", cluster_name}, {"system", sys}, {"prompt_len", len}, {"batch", o.batch}};
  PipelinePlan plan;
  try {
    plan = llm::hpipe::make_plan(p, cl, cluster_name, len, sys, {.batch = o.batch});
  } catch (const Infeasible& e) {
    row["infeasible"] = e.what();
    return row;
  }
  row["slices"] = plan.slices.size();
  row["cuts"] = llm::hpipe::layer_stages(plan).cuts();
  row["predicted_latency_s"] = plan.predicted.latency_s;
  row["predicted_throughput"] = plan.predicted.throughput_per_s;
  row["predicted_energy_j"] = plan.predicted.energy_j;
  if (replay) {
    const auto r =
        llm::hpipe::replay_plan(plan, cl, p, random_prompt(len, p.vocab_size),
                                {.threads = o.threads, .measured_requests = o.replay_repeats});
    row["replay"] = r.to_json();
    row["measured_latency_s"] = r.measured.makespan_s;
    row["measured_throughput"] = double(o.batch) * len / r.measured.makespan_s;
    double e = 0;
    for (size_t j = 0; j < plan.stages.size(); ++j) {
      e += cl.device(plan.stages[j].device()).power_w * r.measured.device_busy_s[j];
    }
    row["measured_energy_j"] = e;
  }
  return row;
}

int run_compare_cmd(const HpipeOptions& o) {
  const ModelProfile p = load_or_measure(o);
  const auto lens = int_list(o.prompt_lens, "--prompt-lens");
  const auto systems = split_list(o.systems);
  const auto replayed = split_list(o.replay_systems);
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& cpath : split_list(o.cluster_path)) {
    ClusterSpec cl = ClusterSpec::from_json_file(cpath);
    for (DeviceProfile& d : cl.devices) d.mem_bytes *= o.mem_scale;
    const std::string cname = std::filesystem::path(cpath).stem().string();
    for (int len : lens) {
      nlohmann::json base_row, gpipe_row;
      for (const std::string& sys : systems) {
        const bool rep = len <= o.replay_max_len &&
                         std::find(replayed.begin(), replayed.end(), sys) != replayed.end();
        std::cerr << "hpipe compare: " << cname << " L=" << len << " " << sys
                  << (rep ? " (replay)" : "") << "\n";
        rows.push_back(compare_one(p, cl, o, cname, len, sys, rep));
      }
    }
  }
  // Ratios against GPipe and Base of the same cluster and length.
  for (auto& r : rows) {
    for (const char* ref : {"gpipe", "base"}) {
      for (const auto& q : rows) {
        if (q["cluster"] == r["cluster"] && q["prompt_len"] == r["prompt_len"] &&
            q["system"] == ref && q.contains("predicted_latency_s") &&
            r.contains("predicted_latency_s")) {
          r[cat("latency_vs_", ref)] =
              r["predicted_latency_s"].get<double>() / q["predicted_latency_s"].get<double>();
          if (r.contains("measured_latency_s") && q.contains("measured_latency_s")) {
            r[cat("measured_latency_vs_", ref)] =
                r["measured_latency_s"].get<double>() / q["measured_latency_s"].get<double>();
          }
        }
      }
    }
  }
  std::printf(
      "| cluster | L | system | slices | cuts | pred. latency s | pred. tok/s | pred. "
      "energy J | latency / GPipe | latency / Base | measured latency s | error |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : rows) {
    if (r.contains("infeasible")) {
      std::printf("| %s | %d | %s | infeasible: %s |\n", r["cluster"].get<std::string>().c_str(),
                  r["prompt_len"].get<int>(), r["system"].get<std::string>().c_str(),
                  r["infeasible"].get<std::string>().c_str());
      continue;
    }
    std::string cuts;
    for (const auto& c : r["cuts"]) cuts += cat(cuts.empty() ? "" : "/", c.get<int>());
    std::string meas = "", err = "";
    if (r.contains("measured_latency_s")) {
      const double m = r["measured_latency_s"], pr = r["predicted_latency_s"];
      meas = cat(m);
      err = cat(std::lround(1000 * (pr - m) / m) / 10.0, "%");
    }
    std::printf("| %s | %d | %s | %d | %s | %.4f | %.1f | %.2f | %.3f | %.3f | %s | %s |\n",
                r["cluster"].get<std::string>().c_str(), r["prompt_len"].get<int>(),
                r["system"].get<std::string>().c_str(), r["slices"].get<int>(), cuts.c_str(),
                r["predicted_latency_s"].get<double>(), r["predicted_throughput"].get<double>(),
                r["predicted_energy_j"].get<double>(), r.value("latency_vs_gpipe", 0.0),
                r.value("latency_vs_base", 0.0), meas.c_str(), err.c_str());
  }
  if (!o.out.empty()) {
    write_json(o.out, {{"build", build_info_json()},
                       {"system", system_json()},
                       {"profile", p.to_json()},
                       {"batch", o.batch},
                       {"rows", rows}});
  }
  return 0;
}

// A generated cluster of n devices in hosts of six (four P100-like at speed 0.4, two 3090-like at
// 1.0, as the paper's testbed), PCIe-class links inside a host, 1 Gbps between hosts.
ClusterSpec scaled_cluster(int n) {
  nlohmann::json j;
  j["description"] = cat("generated: ", n, " devices in hosts of 4 slow + 2 fast");
  for (int i = 0; i < n; ++i) {
    const bool slow = i % 6 < 4;
    j["devices"].push_back({{"name", cat("dev", i)},
                            {"peak_flops", slow ? 2e10 : 5e10},
                            {"mem_bandwidth_bytes_per_s", 1e10},
                            {"mem_bytes", slow ? 16e9 : 24e9},
                            {"power_w", slow ? 250.0 : 350.0},
                            {"speed_factor", slow ? 0.4 : 1.0}});
    if (i > 0) {
      const bool same_host = (i - 1) / 6 == i / 6;
      j["links"].push_back({{"from", cat("dev", i - 1)},
                            {"to", cat("dev", i)},
                            {"bandwidth_bytes_per_s", same_host ? 1.2e10 : 1.25e8},
                            {"latency_s", same_host ? 1e-5 : 2e-4}});
    }
  }
  return ClusterSpec::from_json(j, "generated cluster");
}

int run_scale_cmd(const HpipeOptions& o) {
  const ModelProfile p = load_or_measure(o);
  nlohmann::json rows = nlohmann::json::array();
  std::printf(
      "| devices | layers | L | system | pred. latency s | pred. tok/s | latency / GPipe "
      "| simulator events |\n|---|---|---|---|---|---|---|---|\n");
  for (int n : int_list(o.device_counts, "--devices")) {
    const ClusterSpec cl = scaled_cluster(n);
    ModelProfile pn = p;
    pn.n_layers = std::max(p.n_layers, n);
    for (int len : int_list(o.prompt_lens, "--prompt-lens")) {
      double gpipe = 0;
      for (const std::string& sys : split_list(o.systems)) {
        PipelinePlan plan;
        try {
          plan = llm::hpipe::make_plan(pn, cl, cat("generated-", n), len, sys, {.batch = o.batch});
        } catch (const Infeasible& e) {
          std::printf("| %d | %d | %d | %s | infeasible |\n", n, pn.n_layers, len, sys.c_str());
          continue;
        }
        if (sys == "gpipe") gpipe = plan.predicted.latency_s;
        const auto r = sched::simulate_pipeline(llm::hpipe::predicted_sim_input(plan, pn, cl));
        std::printf("| %d | %d | %d | %s | %.4f | %.1f | %s | %d |\n", n, pn.n_layers, len,
                    sys.c_str(), plan.predicted.latency_s, plan.predicted.throughput_per_s,
                    gpipe > 0 ? cat(plan.predicted.latency_s / gpipe).c_str() : "", r.events);
        rows.push_back({{"devices", n},
                        {"layers", pn.n_layers},
                        {"prompt_len", len},
                        {"system", sys},
                        {"predicted_latency_s", plan.predicted.latency_s},
                        {"predicted_throughput", plan.predicted.throughput_per_s},
                        {"predicted_energy_j", plan.predicted.energy_j},
                        {"cuts", llm::hpipe::layer_stages(plan).cuts()},
                        {"slices", plan.slices.size()}});
      }
    }
  }
  if (!o.out.empty()) write_json(o.out, {{"profile", p.to_json()}, {"rows", rows}});
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<HpipeOptions>();
  CLI::App* hp = app.add_subcommand("hpipe",
                                    "HPipe: plan, profile, simulate and compare "
                                    "token-sliced pipelined prefill");
  hp->require_subcommand(1);
  auto model_opts = [&](CLI::App* s) {
    s->add_option("-m,--model", o->model, "GGUF file (default: SmolLM2-135M-Instruct)");
    s->add_option("--synthetic", o->synthetic,
                  "Generate a model of this preset's shape (llama7b, mistral7b, ...)");
    s->add_option("--synthetic-layers", o->synthetic_layers, "Layers of the generated model")
        ->check(CLI::Range(1, 128));
    s->add_option("--profile", o->profile_path, "A profile from `tandem hpipe profile`");
    s->add_option("--n-layers", o->n_layers,
                  "Plan as if the model had this many layers of the profiled shape")
        ->check(CLI::Range(1, 4096));
    s->add_option("-t,--threads", o->threads, "CPU threads of the reference device")
        ->check(CLI::Range(1, 1024));
    s->add_option("--batch", o->batch, "Requests prefilled together")->check(CLI::Range(1, 4096));
    s->add_option("-o,--output", o->out, "Write the JSON here");
    s->add_flag("--quick", o->quick, "Fewer profiling points");
    s->add_flag("--no-progress", o->no_progress, "No progress on stderr while fetching");
  };
  CLI::App* profile = hp->add_subcommand("profile", "Measure a model's per-layer time and fit it");
  model_opts(profile);
  profile->add_option("--slice-grid", o->slice_grid, "Slice lengths measured")
      ->capture_default_str();
  profile->add_option("--context-grid", o->context_grid, "Context lengths measured")
      ->capture_default_str();
  CLI::App* plan = hp->add_subcommand("plan", "Plan a system for a cluster and prompt length");
  model_opts(plan);
  plan->add_option("--cluster", o->cluster_path, "ClusterSpec JSON")->required();
  plan->add_option("--prompt-len", o->prompt_len, "Prompt tokens")
      ->check(CLI::Range(1, 1 << 24))
      ->required();
  plan->add_option("--system", o->system, "hpipe, gpipe, gp-b, terapipe, base or uniform-K")
      ->capture_default_str();
  CLI::App* sim = hp->add_subcommand("simulate", "Simulate a plan's schedule");
  model_opts(sim);
  sim->add_option("--plan", o->plan_path, "Plan JSON")->required();
  sim->add_option("--cluster", o->cluster_path, "ClusterSpec JSON")->required();
  CLI::App* cmp = hp->add_subcommand("compare", "Every system x prompt length on clusters");
  model_opts(cmp);
  cmp->add_option("--cluster", o->cluster_path, "ClusterSpec JSON files, comma-separated")
      ->required();
  cmp->add_option("--systems", o->systems, "Systems")->capture_default_str();
  cmp->add_option("--prompt-lens", o->prompt_lens, "Prompt lengths")->capture_default_str();
  cmp->add_option("--replay", o->replay_systems,
                  "Systems also measured by the in-process replay (comma-separated)");
  cmp->add_option("--replay-repeats", o->replay_repeats,
                  "Requests each replay runs (the least time per stage x slice is kept)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmp->add_option("--mem-scale", o->mem_scale, "Multiply every device's mem_bytes by this")
      ->check(CLI::Range(1e-6, 1e6))
      ->capture_default_str();
  cmp->add_option("--replay-max-len", o->replay_max_len, "Replay prompts up to this length")
      ->capture_default_str();
  CLI::App* scale = hp->add_subcommand("scale", "Simulator predictions for 8..64 devices");
  model_opts(scale);
  scale->add_option("--devices", o->device_counts, "Device counts")->capture_default_str();
  scale->add_option("--systems", o->systems, "Systems")->capture_default_str();
  scale->add_option("--prompt-lens", o->prompt_lens, "Prompt lengths")->capture_default_str();
  return Command{hp, [o, profile, plan, sim, cmp, scale] {
                   if (*profile) return run_profile_cmd(*o);
                   if (*plan) return run_plan_cmd(*o);
                   if (*sim) return run_simulate_cmd(*o);
                   if (*cmp) return run_compare_cmd(*o);
                   if (*scale) return run_scale_cmd(*o);
                   return 1;
                 }};
});

}  // namespace
}  // namespace tandem::cli
