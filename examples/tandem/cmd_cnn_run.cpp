// SPDX-License-Identifier: Apache-2.0
// `tandem cnn-run`: imports an ONNX CNN, runs it once (after a warm-up) on a random image or a raw
// float32 file, and prints the model summary, the latency and the outputs (top classes for a
// [N, classes] output, value statistics for the rest).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>

#include "commands.h"
#include "report.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"

namespace tandem::cli {
namespace {

struct CnnRunOptions {
  std::string model;
  std::string input = "random";
  int threads = 1;
  int batch = 1;
  int top = 5;
  int runs = 1;
  bool profile = false;
  std::string device = "cpu";
  std::string output = "md";
};

Tensor make_input(const std::string& spec, const Shape& shape) {
  Tensor x = Tensor::empty(shape, DType::kF32);
  float* p = x.data<float>();
  if (spec == "random") {
    std::mt19937 rng(0);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) p[i] = d(rng);
    return x;
  }
  std::ifstream f(spec, std::ios::binary);
  if (!f) throw NotFound(cat("--input: cannot open '", spec, "'"));
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (size != x.nbytes())
    throw InvalidArgument(cat("--input: '", spec, "' has ", size, " bytes; the model's input ",
                              shape.to_string(), " needs ", x.nbytes(),
                              " (raw little-endian float32, NCHW)"));
  f.seekg(0);
  f.read(static_cast<char*>(x.raw_data()), x.nbytes());
  return x;
}

nlohmann::json describe_output(const std::string& name, const Tensor& y, int top) {
  const float* p = y.data<float>();
  const int64_t n = y.numel();
  double sum = 0, mn = INFINITY, mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    sum += p[i];
    mn = std::min<double>(mn, p[i]);
    mx = std::max<double>(mx, p[i]);
  }
  nlohmann::json j = {{"name", name},
                      {"shape", y.shape().to_vector()},
                      {"mean", sum / n},
                      {"min", mn},
                      {"max", mx}};
  if (y.rank() == 2 && top > 0) {  // top classes of the first image
    const int64_t c = y.size(1);
    std::vector<int64_t> idx(static_cast<size_t>(c));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t k = std::min<int64_t>(top, c);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b]; });
    nlohmann::json t = nlohmann::json::array();
    for (int64_t i = 0; i < k; ++i) t.push_back({{"class", idx[i]}, {"score", p[idx[i]]}});
    j["top"] = t;
  }
  return j;
}

int run_cnn(const CnnRunOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const cnn::Graph g = cnn::import_onnx(o.model, {.batch = o.batch});
  const double import_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (g.inputs().size() != 1)
    throw Unsupported(cat(o.model, ": cnn-run feeds one input; the model has ", g.inputs().size()));
  const Tensor x = make_input(o.input, g.tensor(g.inputs()[0]).shape);
  cnn::Executor ex(g,
                   {.threads = o.threads, .profile = o.profile, .device = Device::parse(o.device)});
  const auto t1 = Clock::now();
  ex.run({x});  // first run: primitive creation and weight packing
  const double first_ms = std::chrono::duration<double, std::milli>(Clock::now() - t1).count();
  // Timed runs: the latency is their median; the profile holds each node's median.
  std::vector<double> run_samples, node_sum_samples;
  std::vector<std::vector<double>> node_samples(g.nodes().size());
  std::vector<Tensor> ys;
  for (int r = 0; r < o.runs; ++r) {
    const auto t2 = Clock::now();
    ys = ex.run({x});
    run_samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t2).count());
    if (o.profile) {
      double sum = 0;
      for (size_t i = 0; i < g.nodes().size(); ++i) {
        node_samples[i].push_back(ex.node_times_ms()[i]);
        sum += ex.node_times_ms()[i];
      }
      node_sum_samples.push_back(sum);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  const double run_ms = median(run_samples);

  nlohmann::json outs = nlohmann::json::array();
  for (size_t i = 0; i < ys.size(); ++i)
    outs.push_back(describe_output(g.tensor(g.outputs()[i]).name, ys[i], o.top));
  const double gflop = static_cast<double>(g.total_flops()) * 1e-9;
  nlohmann::json j = {{"schema_version", 1},
                      {"build", build_info_json()},
                      {"system", system_json()},
                      {"params",
                       {{"model", o.model},
                        {"input", o.input},
                        {"threads", o.threads},
                        {"batch", o.batch},
                        {"device", o.device}}},
                      {"nodes", g.nodes().size()},
                      {"gflop", gflop},
                      {"weight_bytes", g.weight_bytes()},
                      {"activation_bytes_planned", ex.memory_plan().planned_bytes},
                      {"activation_bytes_unplanned", ex.memory_plan().naive_bytes},
                      {"import_ms", import_ms},
                      {"first_run_ms", first_ms},
                      {"latency_ms", run_ms},
                      {"latency_samples_ms", run_samples},
                      {"gflop_per_s", gflop / (run_ms * 1e-3)},
                      {"outputs", outs}};
  if (o.profile) {  // time per node and per op kind (convs split by kernel shape class)
    std::map<std::string, std::pair<double, int64_t>> by_kind;
    const std::vector<std::string> impls = ex.node_impls();
    nlohmann::json nodes = nlohmann::json::array();
    for (size_t i = 0; i < g.nodes().size(); ++i) {
      const cnn::Node& n = g.node(static_cast<int>(i));
      std::string kind = cnn::op_name(n.op);
      if (n.op == cnn::OpKind::kConv)
        kind += n.groups > 1 && n.groups == n.weight.size(0) ? " depthwise"
                : n.window.kh * n.window.kw == 1             ? " 1x1"
                                                             : " kxk";
      const double ms = median(node_samples[i]);
      const int64_t flops = g.flops(static_cast<int>(i));
      by_kind[kind].first += ms;
      by_kind[kind].second += flops;
      const Shape& ys0 = g.tensor(n.outputs[0]).shape;
      nodes.push_back({{"name", n.name},
                       {"op", kind},
                       {"impl", impls[i]},
                       {"in", g.tensor(n.inputs[0]).shape.to_vector()},
                       {"out", ys0.to_vector()},
                       {"ms", ms},
                       {"flops", flops},
                       {"gflop_per_s", ms > 0 ? flops * 1e-9 / (ms * 1e-3) : 0.0}});
    }
    nlohmann::json kinds = nlohmann::json::object();
    for (const auto& [k, v] : by_kind)
      kinds[k] = {{"ms", v.first}, {"gflop_per_s", v.second * 1e-9 / (v.first * 1e-3)}};
    // Per run: the nodes' times together (the rest of the run is outside every node).
    j["profile"] = {{"by_op", kinds}, {"nodes", nodes}, {"node_sum_samples_ms", node_sum_samples}};
  }
  if (o.output == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf(
      "model %s: %zu nodes, %.2f GFLOP, %.1f MiB weights, activations %.1f MiB planned "
      "(%.1f MiB unplanned)\n",
      o.model.c_str(), g.nodes().size(), gflop, g.weight_bytes() / 1048576.0,
      ex.memory_plan().planned_bytes / 1048576.0, ex.memory_plan().naive_bytes / 1048576.0);
  std::printf("import %.1f ms, first run %.1f ms, run %.2f ms (%d thread%s, %.1f GFLOP/s)\n\n",
              import_ms, first_ms, run_ms, o.threads, o.threads == 1 ? "" : "s",
              gflop / (run_ms * 1e-3));
  if (o.profile) {
    std::printf("| op | ms | GFLOP/s |\n|---|---|---|\n");
    for (const auto& [k, v] : j["profile"]["by_op"].items())
      std::printf("| %s | %.2f | %.1f |\n", k.c_str(), v["ms"].get<double>(),
                  v["gflop_per_s"].get<double>());
    std::printf("\n| node | op | impl | in -> out | ms | GFLOP/s |\n|---|---|---|---|---|---|\n");
    for (const auto& nd : j["profile"]["nodes"])
      std::printf("| %s | %s | %s | %s -> %s | %.3f | %.1f |\n",
                  nd["name"].get<std::string>().c_str(), nd["op"].get<std::string>().c_str(),
                  nd["impl"].get<std::string>().c_str(), nd["in"].dump().c_str(),
                  nd["out"].dump().c_str(), nd["ms"].get<double>(),
                  nd["gflop_per_s"].get<double>());
    std::printf("\n");
  }
  std::printf("| output | shape | min | mean | max | top classes |\n|---|---|---|---|---|---|\n");
  for (const auto& out : outs) {
    std::string top;
    if (out.contains("top"))
      for (const auto& t : out["top"])
        top += cat(t["class"].get<int64_t>(), " (", t["score"].get<double>(), ") ");
    std::printf("| %s | %s | %.4g | %.4g | %.4g | %s |\n", out["name"].get<std::string>().c_str(),
                out["shape"].dump().c_str(), out["min"].get<double>(), out["mean"].get<double>(),
                out["max"].get<double>(), top.c_str());
  }
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<CnnRunOptions>();
  CLI::App* sub = app.add_subcommand("cnn-run", "Run an ONNX CNN once on the CPU");
  sub->add_option("-m,--model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  sub->add_option("--input", o->input,
                  "'random' (fixed-seed normal) or a raw little-endian float32 NCHW file");
  sub->add_option("-t,--threads", o->threads, "CPU threads")->check(CLI::Range(1, 1024));
  sub->add_option("--batch", o->batch, "batch for a symbolic leading input dimension")
      ->check(CLI::Range(1, 4096));
  sub->add_option("--top", o->top, "top classes to list for [N, classes] outputs");
  sub->add_option("-r,--runs", o->runs, "timed runs after the warm-up (latency: their median)")
      ->check(CLI::Range(1, 100000));
  sub->add_flag("--profile", o->profile,
                "time every node (median over the runs); print each node's kernel (oneDNN "
                "impl_info_str), ms and GFLOP/s, and the time per op kind");
  sub->add_option("-d,--device", o->device,
                  "cpu, or cuda:N (cuDNN/cuBLAS runner of the CUDA module)");
  sub->add_option("-o,--output", o->output, "output format")->check(CLI::IsMember({"md", "json"}));
  return Command{sub, [o] { return run_cnn(*o); }};
});

}  // namespace
}  // namespace tandem::cli
