// SPDX-License-Identifier: Apache-2.0
// Subcommands of the `tandem` tool. Each add_* registers its options on the app and returns the
// options struct the callback reads; main.cpp runs the chosen one.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/llm/model.h"

namespace tandem::cli {

// For string options where an empty value would silently mean "not given" (--kv-quant '').
inline const CLI::Validator kNonEmpty(
    [](std::string& s) { return s.empty() ? std::string("must not be empty") : std::string(); },
    "NONEMPTY", "non-empty");

// A number in [lo, hi]; unlike CLI::Range it refuses nan (every comparison with nan is false).
inline CLI::Validator number_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v) || !(v >= lo && v <= hi))
          return "Value " + s + " not in range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                 "]";
        return std::string();
      },
      "NUMBER in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// --workers DEVICE=ENDPOINT items as a map; InvalidArgument naming `command` for a malformed one.
inline std::map<std::string, std::string> worker_map(const std::vector<std::string>& items,
                                                     const std::string& command) {
  std::map<std::string, std::string> workers;
  for (const auto& w : items) {
    const auto eq = w.find('=');
    if (eq == std::string::npos || eq == 0)
      throw InvalidArgument(command + ": --workers expects DEVICE=ENDPOINT, got '" + w + "'");
    workers[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return workers;
}

struct DevicesOptions {
  std::string output = "md";
};
struct ProfileOptions {
  std::string device = "cpu";
  std::string out_path;
  int repeats = 3;
  bool quick = false;
  bool no_tables = false;
  bool no_progress = false;
};
struct BenchOptions {
  std::string device = "cpu";
  std::string output = "md";
  std::string suite = "gemm,attention";
  int repetitions = 5;
  int warmup = 1;
  int threads = 0;
  bool no_progress = false;
};

struct InspectOptions {
  std::string model;  // empty: the default model (fetched on first use)
  std::string output = "md";
  bool no_progress = false;
};

struct GenerateOptions {
  std::string model;  // empty: the default model (fetched on first use)
  std::string prompt;
  int n_predict = 128;
  bool chat = false;
  bool echo = false;
  float temperature = 0.0f;  // 0: greedy
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  int threads = 0;
  int prefill_chunk = 128;
  std::string device = "cpu";  // cpu or cuda:N
  int batch = 1;  // sequences generated together (copies of the prompt, seeds seed + i)
  std::string kv_dtype = "f32";    // KV cache storage: f32 or f16
  std::string kv_policy = "full";  // KV policy spec (registry name or '+' chain)
  std::string kv_quant;            // quantization scheme appended to kv_policy (qokv, kivi2, ...)
  std::string kv_budget;           // tokens per (layer, KV head) or N% of the prompt
  int kv_window = 32;              // observation window / recent tokens
  std::string kv_calibration;      // calibration file (ClusterAttn, QoKV)
  std::vector<std::string> kv_extra;                            // policy settings key=value
  llm::DecodeArithmetic decode = llm::DecodeArithmetic::kInt8;  // of the single-token steps
  bool no_progress = false;
};

// Self-registering subcommands (the engines' commands: cnn-run, rec-serve, ...). A cmd_*.cpp file
// defines, at namespace scope,
//   static const tandem::cli::CommandRegistration kReg([](CLI::App& app) {
//     auto opts = std::make_shared<MyOptions>();
//     CLI::App* sub = app.add_subcommand("my-cmd", "What it does");
//     sub->add_option("-m,--model", opts->model, "...");
//     return tandem::cli::Command{sub, [opts] { return run_my_cmd(*opts); }};
//   });
// and main.cpp runs the chosen one; no other file needs editing.
struct Command {
  CLI::App* subcommand = nullptr;
  std::function<int()> run;
};
using AddCommand = std::function<Command(CLI::App& app)>;
std::vector<AddCommand>& command_registry();
struct CommandRegistration {
  explicit CommandRegistration(AddCommand add) { command_registry().push_back(std::move(add)); }
};

int run_devices(const DevicesOptions& o);
int run_profile(const ProfileOptions& o);
int run_bench(const BenchOptions& o);
int run_inspect(const InspectOptions& o);
int run_generate(const GenerateOptions& o);

// The KV policy of one sequence from the kv_* fields of `o` (--kv-policy, --kv-budget,
// --kv-window, --kv-calibration, --kv-extra, --kv-quant; seed): a fresh instance per cache, as
// policies keep per-sequence state (cmd_generate.cpp; `tandem serve` uses it too).
std::shared_ptr<llm::KvPolicy> make_sequence_kv_policy(const GenerateOptions& o,
                                                       const llm::Model& model);

}  // namespace tandem::cli
