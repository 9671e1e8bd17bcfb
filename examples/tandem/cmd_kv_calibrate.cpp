// SPDX-License-Identifier: Apache-2.0
// `tandem kv-calibrate`: profiles ClusterAttn's DBAC parameters (eps, rho, min_len, pool) on about
// 20% of a profiling set cut from a text (llm::calibrate_clusterattn) and writes the best as the
// JSON file `--kv-calibration` reads. The grid's mean KL per point goes to stdout.
//
//   tandem kv-calibrate -f ~/.cache/tandem/texts/austen.txt --budget 256 -o clusterattn.json

#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>

#include "commands.h"
#include "model_path.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_eval.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {
namespace {

struct KvCalibrateCliOptions {
  std::string model;
  std::string file;
  std::string out = "clusterattn_calibration.json";
  llm::KvCalibrationConfig c;
  std::string budget = "256";
  int threads = 0;
  bool no_progress = false;
};

int run_kv_calibrate(KvCalibrateCliOptions& o) {
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  const std::string path = resolve_model_path(o.model, !o.no_progress);
  const llm::Model model = llm::Model::load(path);
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));
  std::ifstream in(o.file, std::ios::binary);
  if (!in) throw IoError("kv-calibrate: cannot open text file '" + o.file + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  o.c.budget = llm::parse_kv_budget(o.budget);
  if (!o.no_progress) {
    o.c.progress = [](const std::string& s) {
      std::fprintf(stderr, "kv-calibrate: %s\n", s.c_str());
    };
  }
  const auto r = llm::calibrate_clusterattn(model, tokenizer, ss.str(), o.c);
  std::printf(
      "| pool | eps | rho | min_len | mean KL | kept / budget |\n|---|---|---|---|---|---|\n");
  for (const auto& p : r.grid) {
    std::printf("| %d | %d | %.2f | %d | %.5f | %.3f |\n", p.params.pool, p.params.dbac.eps,
                p.params.dbac.rho, p.params.dbac.min_len, p.kl_mean, p.kept_fraction);
  }
  const std::string note =
      cat("kv-calibrate: ", r.segments_used, " of ", o.c.segments, " segments of ", o.c.context,
          " tokens from ", o.file, ", budget ", o.c.budget.label(), ", mean KL ", r.best_kl);
  llm::save_clusterattn_params(o.out, r.best, note);
  std::printf("\nbest: pool %d eps %d rho %.2f min_len %d, mean KL %.5f -> %s\n", r.best.pool,
              r.best.dbac.eps, r.best.dbac.rho, r.best.dbac.min_len, r.best_kl, o.out.c_str());
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<KvCalibrateCliOptions>();
  CLI::App* sub =
      app.add_subcommand("kv-calibrate",
                         "Profile ClusterAttn's clustering parameters on ~20% of a text and write "
                         "them as JSON (for --kv-calibration)");
  sub->add_option("-m,--model", o->model,
                  "GGUF model file (default: SmolLM2-135M-Instruct, fetched on first use)");
  sub->add_option("-f,--file", o->file, "Profiling text (UTF-8)")
      ->required()
      ->check(CLI::ExistingFile);
  sub->add_option("-o,--out", o->out, "Calibration JSON to write");
  sub->add_option("--context", o->c.context, "Tokens per profiling segment")
      ->check(CLI::Range(16, 1 << 20));
  sub->add_option("--continuation", o->c.continuation, "Decode steps scored per segment")
      ->check(CLI::Range(2, 4096));
  sub->add_option("--segments", o->c.segments, "Segments in the profiling set")
      ->check(CLI::Range(1, 10000));
  sub->add_option("--fraction", o->c.fraction, "Fraction of the segments used")
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--budget", o->budget, "Budget (tokens or N%)");
  sub->add_option("--kv-window", o->c.window, "Observation window")->check(CLI::Range(0, 1 << 16));
  sub->add_option("--eps", o->c.eps, "eps grid")->delimiter(',');
  sub->add_option("--rho", o->c.rho, "rho grid")->delimiter(',');
  sub->add_option("--min-len", o->c.min_len, "min_len grid")->delimiter(',');
  sub->add_option("--pool", o->c.pool, "pool kernel grid")->delimiter(',');
  sub->add_flag("--fill", o->c.fill,
                "Calibrate ClusterAttn with its budget filled by single tokens after the clusters");
  sub->add_option("-t,--threads", o->threads, "CPU threads (0: the default)")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--no-progress", o->no_progress, "No progress on stderr");
  return Command{sub, [o] { return run_kv_calibrate(*o); }};
});

}  // namespace
}  // namespace tandem::cli
