// SPDX-License-Identifier: Apache-2.0
// `tandem kv-eval`: the KV-policy fidelity harness (tandem/llm/kv_eval.h) on a GGUF model and real
// text. Every policy x budget compresses a copy of one recorded prefill per context; the markdown
// table goes to stdout, --json writes the full record (per-layer attention errors, needle answers)
// for scripts/llm/kv_plot.py. Progress goes to stderr, one line per run. --ruler multikey,vartrack
// adds the RULER-style retrieval tasks (kv_ruler.h); --no-fidelity skips the teacher-forced runs.
//
//   tandem kv-eval -f ~/.cache/tandem/texts/kjv.txt --haystack ~/.cache/tandem/texts/austen.txt \
//       --contexts 2048,4096 --budgets 128,256,512,1024,10%,25%,50% --json kv.json

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "model_path.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_eval.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {
namespace {

struct KvEvalCliOptions {
  std::string model;
  std::string file;
  std::string haystack;
  std::vector<int64_t> contexts = {2048, 4096};
  std::vector<std::string> budgets = {"128", "256", "512", "1024", "10%", "25%", "50%"};
  std::vector<std::string> policies;
  std::vector<double> depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  bool no_needle = false;
  bool no_fidelity = false;
  std::vector<std::string> ruler;
  int ruler_samples = 2;
  int continuation = 32;
  int window = 32;
  int64_t offset = 0;
  std::string calibration;
  std::vector<std::string> extra;
  int threads = 0;
  int prefill_chunk = 512;
  llm::DecodeArithmetic decode = llm::DecodeArithmetic::kInt8;
  std::string json_path;
  bool no_progress = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(cat("kv-eval: cannot open text file '", path, "'"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int run_kv_eval_cli(const KvEvalCliOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  const std::string path = resolve_model_path(o.model, !o.no_progress);
  const llm::Model model = llm::Model::load(path);
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));
  llm::KvEvalConfig c;
  c.contexts = o.contexts;
  for (const auto& b : o.budgets) c.budgets.push_back(llm::parse_kv_budget(b));
  if (!o.policies.empty()) c.policies = o.policies;
  c.needle_depths = o.no_needle ? std::vector<double>{} : o.depths;
  c.fidelity = !o.no_fidelity;
  c.ruler_tasks = o.ruler;
  c.ruler_samples = o.ruler_samples;
  c.continuation = o.continuation;
  c.window = o.window;
  c.text_offset = o.offset;
  c.calibration_path = o.calibration;
  c.prefill_chunk = o.prefill_chunk;
  c.decode = o.decode;
  for (const std::string& kv : o.extra) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InvalidArgument("kv-eval: --kv-extra '" + kv + "' is not key=value");
    }
    c.extra[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!o.no_progress) {
    c.progress = [](const std::string& line) {
      std::fprintf(stderr, "kv-eval: %s\n", line.c_str());
    };
  }
  const std::string text = read_text(o.file);
  const std::string haystack = o.haystack.empty() ? text : read_text(o.haystack);
  llm::KvEvalResult r = llm::run_kv_eval(model, tokenizer, text, haystack, c);
  r.text_name = o.file;
  r.haystack_name = o.haystack.empty() ? o.file : o.haystack;
  std::cout << r.table();
  if (!o.json_path.empty()) {
    nlohmann::json j = {{"schema_version", 1},          {"kind", "kv-eval"},
                        {"build", build_info_json()},   {"system", system_json()},
                        {"threads", cpu_num_threads()}, {"model_path", path},
                        {"results", r.to_json()}};
    std::ofstream out(o.json_path);
    if (!out) throw IoError("kv-eval: cannot write '" + o.json_path + "'");
    out << j.dump(1) << "\n";
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<KvEvalCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "kv-eval",
      "KV-cache policy fidelity on real text: KL / top-1 / PPL / attention error vs the full "
      "cache, passkey retrieval, measured KV bytes, TTFT and decode speed per policy x budget");
  sub->add_option("-m,--model", o->model,
                  "GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use)");
  sub->add_option("-f,--file", o->file, "Text for the fidelity runs (UTF-8)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("--haystack", o->haystack, "Text the needles are planted in (default: --file)")
      ->check(CLI::ExistingFile);
  sub->add_option("--contexts", o->contexts, "Prompt lengths in tokens")->delimiter(',');
  sub->add_option("--budgets", o->budgets, "Budgets: tokens per (layer, KV head) or N%")
      ->delimiter(',');
  sub->add_option("--policies", o->policies,
                  "Policy specs ('+' chains allowed; default: full and every eviction policy)")
      ->delimiter(',');
  sub->add_option("--depths", o->depths, "Needle depths in [0, 1]")
      ->delimiter(',')
      ->check(number_in(0.0, 1.0));
  sub->add_flag("--no-needle", o->no_needle, "Skip the needle (passkey) test");
  sub->add_flag("--no-fidelity", o->no_fidelity, "Skip the fidelity runs (KL, top-1, PPL)");
  sub->add_option("--ruler", o->ruler, "RULER-style tasks: multikey, vartrack")->delimiter(',');
  sub->add_option("--ruler-samples", o->ruler_samples, "Prompts per RULER task and context");
  sub->add_option("--continuation", o->continuation, "Teacher-forced decode steps scored")
      ->check(CLI::Range(2, 4096));
  sub->add_option("--kv-window", o->window, "Observation window / recent tokens")
      ->check(CLI::Range(0, 1 << 16));
  sub->add_option("--offset", o->offset, "Token offset of the fidelity context in the text")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--kv-calibration", o->calibration,
                  "Calibration file (ClusterAttn's or QoKV's), or NAME=FILE[,NAME=FILE] per "
                  "policy, e.g. clusterattn=c.json,qokv=q.json");
  sub->add_option("--kv-extra", o->extra, "Policy setting key=value (repeatable)");
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per prefill step")
      ->check(CLI::Range(1, 1 << 20));
  add_decode_option(sub, o->decode);
  sub->add_option("--json", o->json_path, "Also write the full record as JSON here");
  sub->add_flag("--no-progress", o->no_progress, "No progress on stderr");
  return Command{sub, [o] { return run_kv_eval_cli(*o); }};
});

}  // namespace
}  // namespace tandem::cli
