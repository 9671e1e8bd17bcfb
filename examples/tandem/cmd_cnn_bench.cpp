// SPDX-License-Identifier: Apache-2.0
// `tandem bench-cnn`: batch-1 latency of ONNX CNNs on the CPU for each thread count, GFLOP/s
// against the FMA peak measured in the same process, and ONNX Runtime on the same files in the
// same run (scripts/cnn/bench_ort.py, run once per model right after tandem's samples), reported
// as the ratio ORT latency / tandem latency (> 1: tandem is faster). Results on stdout (md or
// JSON), progress on stderr.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>

#include "commands.h"
#include "report.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"

namespace tandem::cli {
namespace {

// CPU time this process has used (all threads), ms.
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct CnnBenchOptions {
  std::vector<std::string> models;  // files, or names looked up in models_dir
  std::string models_dir = "build/cnn_models";
  std::string threads = "1,2";
  int repetitions = 5;
  int warmup = 1;
  bool ort = true;
  std::string ort_script = "scripts/cnn/bench_ort.py";
  std::string python = "python3";
  std::string output = "md";
  bool no_progress = false;
};

std::vector<int> parse_threads(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const int t = std::stoi(item);
    if (t < 1) throw InvalidArgument(cat("--threads: ", item, " is not a positive count"));
    v.push_back(t);
  }
  if (v.empty()) throw InvalidArgument("--threads: empty list");
  return v;
}

std::string resolve_model(const CnnBenchOptions& o, const std::string& m) {
  if (std::filesystem::exists(m)) return m;
  const auto p = std::filesystem::path(o.models_dir) / (m + ".onnx");
  if (std::filesystem::exists(p)) return p.string();
  throw NotFound(cat("model '", m, "' is neither a file nor ", p.string(),
                     " (generate with python3 scripts/cnn/gen_models.py --out ", o.models_dir,
                     ")"));
}

// OpenMP's wait policy: libgomp reads OMP_WAIT_POLICY once at load. With the default (spin, then
// sleep) a 2-thread run on an oversubscribed machine spends most of its time spinning at barriers
// while the other thread waits to be scheduled (measured: MobileNetV2 on 2 threads 1.6 s instead
// of 17 ms on the shared 2-vCPU VM). ONNX Runtime gets the matching setting (no spinning).
bool passive_wait() {
  const char* e = std::getenv("OMP_WAIT_POLICY");
  return e && (std::string(e) == "passive" || std::string(e) == "PASSIVE");
}

// Runs the ONNX Runtime driver; returns its JSON, or {"error": why}.
nlohmann::json run_ort(const CnnBenchOptions& o, const std::string& model, int threads) {
  if (!std::filesystem::exists(o.ort_script))
    return {{"error", cat("ONNX Runtime driver ", o.ort_script, " not found (--ort-script)")}};
  const std::string cmd =
      cat(o.python, " '", o.ort_script, "' --model '", model, "' --threads ", threads, " -r ",
          o.repetitions, " --warmup ", o.warmup, " 2>/dev/null");
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return {{"error", "cannot start " + o.python}};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int rc = pclose(f);
  try {
    nlohmann::json j = nlohmann::json::parse(out);
    if (rc != 0 && !j.contains("error")) j["error"] = cat("driver exit status ", rc);
    return j;
  } catch (const std::exception&) {
    return {{"error", cat("driver exit status ", rc, ", no JSON on stdout")}};
  }
}

int run_cnn_bench(const CnnBenchOptions& o) {
  const std::vector<int> thread_counts = parse_threads(o.threads);
  std::vector<std::string> models = o.models;
  if (models.empty()) models = {"resnet50", "mobilenet_v2", "inception_v3", "yolov5s"};
  Progress progress(!o.no_progress);
  if (!passive_wait() && *std::max_element(thread_counts.begin(), thread_counts.end()) > 1)
    std::fprintf(stderr,
                 "bench-cnn: OMP_WAIT_POLICY is not 'passive'; on a shared machine multi-thread "
                 "runs can be dominated by spinning (see docs/cnn.md)\n");
  std::map<int, double> peak;
  for (int t : thread_counts) {
    progress.update(cat("measuring the FMA peak on ", t, " thread(s)"));
    peak[t] = measure_cpu_fma_peak_flops(t);
  }
  nlohmann::json records = nlohmann::json::array();
  for (const std::string& m : models) {
    const std::string path = resolve_model(o, m);
    const cnn::Graph g = cnn::import_onnx(path);
    const Shape in_shape = g.tensor(g.inputs()[0]).shape;
    Tensor x = Tensor::empty(in_shape, DType::kF32);
    std::mt19937 rng(0);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = d(rng);
    const double gflop = static_cast<double>(g.total_flops()) * 1e-9;
    for (int t : thread_counts) {
      cnn::Executor ex(g, {.threads = t});
      for (int w = 0; w < std::max(o.warmup, 1); ++w) ex.run({x});
      std::vector<double> samples, cpu;
      for (int r = 0; r < o.repetitions; ++r) {
        progress.update(cat(std::filesystem::path(path).stem().string(), " threads ", t, " run ",
                            r + 1, "/", o.repetitions));
        const double c0 = process_cpu_ms();
        const auto t0 = std::chrono::steady_clock::now();
        ex.run({x});
        samples.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
        cpu.push_back(process_cpu_ms() - c0);
      }
      const SampleStats s = stats_of(samples);
      nlohmann::json rec = {{"model", std::filesystem::path(path).stem().string()},
                            {"file", path},
                            {"threads", t},
                            {"input_shape", in_shape.to_vector()},
                            {"gflop", gflop},
                            {"samples_ms", samples},
                            // CPU time of the process per run (all threads): on a shared machine
                            // it leaves out the time spent waiting for a CPU.
                            {"cpu_ms", cpu},
                            {"latency_ms",
                             {{"mean", s.mean},
                              {"stddev", s.stddev},
                              {"p50", s.p50},
                              {"p99", s.p99},
                              {"min", s.min}}},
                            {"gflop_per_s", gflop / (s.p50 * 1e-3)},
                            {"peak_gflop_per_s", peak[t] * 1e-9},
                            {"fraction_of_peak", gflop / (s.p50 * 1e-3) / (peak[t] * 1e-9)}};
      if (o.ort) {
        progress.update(
            cat(std::filesystem::path(path).stem().string(), " threads ", t, ": ONNX Runtime"));
        const nlohmann::json ort = run_ort(o, path, t);
        if (ort.contains("results") && !ort["results"].empty()) {
          const std::vector<double> os = ort["results"][0]["samples_ms"];
          const SampleStats so = stats_of(os);
          rec["onnxruntime"] = {
              {"version", ort["onnxruntime"]},
              {"samples_ms", os},
              {"latency_ms", {{"mean", so.mean}, {"p50", so.p50}, {"min", so.min}}},
              {"ratio_ort_over_tandem_p50", so.p50 / s.p50},
              {"ratio_ort_over_tandem_min", so.min / s.min}};
        } else {
          rec["onnxruntime"] = {{"error", ort.value("error", std::string("no result"))}};
        }
      }
      records.push_back(rec);
    }
  }
  progress.update("");
  if (o.output == "json") {
    const nlohmann::json j = {{"schema_version", 1},
                              {"build", build_info_json()},
                              {"system", system_json()},
                              {"params",
                               {{"threads", o.threads},
                                {"omp_wait_policy", passive_wait() ? "passive" : "default"},
                                {"ort_spinning", !passive_wait()},
                                {"repetitions", o.repetitions},
                                {"warmup", o.warmup},
                                {"batch", 1}}},
                              {"results", records}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("tandem bench-cnn: batch 1, p50 of %d runs; FMA peak measured here\n\n",
              o.repetitions);
  std::printf(
      "| model | threads | GFLOP | tandem ms | GFLOP/s | %% of peak | ORT ms | ORT/tandem |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const auto& r : records) {
    std::string ort_ms = "-", ratio = "-";
    if (r.contains("onnxruntime") && r["onnxruntime"].contains("latency_ms")) {
      ort_ms = cat(r["onnxruntime"]["latency_ms"]["p50"].get<double>());
      char b[32];
      std::snprintf(b, sizeof b, "%.2f",
                    r["onnxruntime"]["ratio_ort_over_tandem_p50"].get<double>());
      ratio = b;
      std::snprintf(b, sizeof b, "%.1f", r["onnxruntime"]["latency_ms"]["p50"].get<double>());
      ort_ms = b;
    } else if (r.contains("onnxruntime")) {
      ort_ms = r["onnxruntime"]["error"].get<std::string>();
    }
    std::printf("| %s | %d | %.2f | %.1f | %.1f | %.0f%% | %s | %s |\n",
                r["model"].get<std::string>().c_str(), r["threads"].get<int>(),
                r["gflop"].get<double>(), r["latency_ms"]["p50"].get<double>(),
                r["gflop_per_s"].get<double>(), 100 * r["fraction_of_peak"].get<double>(),
                ort_ms.c_str(), ratio.c_str());
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<CnnBenchOptions>();
  CLI::App* sub = app.add_subcommand(
      "bench-cnn", "Latency of ONNX CNNs per thread count, against ONNX Runtime in the same run");
  sub->add_option("-m,--models", o->models,
                  "ONNX files or generated model names (default: resnet50 mobilenet_v2 "
                  "inception_v3 yolov5s)")
      ->delimiter(',');
  sub->add_option("--models-dir", o->models_dir, "where generated models are looked up");
  sub->add_option("-t,--threads", o->threads, "comma-separated thread counts");
  sub->add_option("-r,--repetitions", o->repetitions, "timed runs")->check(CLI::Range(1, 10000));
  sub->add_option("--warmup", o->warmup, "untimed runs first")->check(CLI::Range(0, 1000));
  sub->add_flag("!--no-ort", o->ort, "skip ONNX Runtime");
  sub->add_option("--ort-script", o->ort_script, "the ONNX Runtime driver");
  sub->add_option("--python", o->python, "Python interpreter for the driver");
  sub->add_option("-o,--output", o->output, "output format")->check(CLI::IsMember({"md", "json"}));
  sub->add_flag("--no-progress", o->no_progress, "no progress line on stderr");
  return Command{sub, [o] { return run_cnn_bench(*o); }};
});

}  // namespace
}  // namespace tandem::cli
