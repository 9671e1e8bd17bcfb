// SPDX-License-Identifier: Apache-2.0
// tandem_bench_kernels: the kernel performance suite of issue 2 (Google Benchmark).
//
// Compute-bound f32 GEMM (SmolLM2-135M and LLaMA-7B layer shapes) and 3x3 convolution (ResNet
// stages) run through tandem, oneDNN and OpenBLAS in the same process on the same buffers;
// memory-bound RMSNorm, softmax and dequantizing GEMV, and GQA attention run through tandem. Before
// the run the process measures its own ceilings (FMA peak on 1 and N threads, triad bandwidth) and
// records them, tandem's build, the libraries' versions and the OPENBLAS_* environment in the
// benchmark context (the "context" object of --benchmark_format=json / --benchmark_out). After the
// run a markdown summary with the tandem/oneDNN and tandem/OpenBLAS ratios goes to stdout (to
// stderr when stdout carries JSON or CSV). scripts/bench_kernels.sh runs it with repetitions and
// random interleaving and scripts/bench_report.py turns the JSON into
// bench/results/kernels-<host>-<date>.json.
//
//   tandem_bench_kernels --benchmark_filter='gemm/smollm2' --benchmark_repetitions=3
//
// Benchmarks never assert timings; each tandem case checks its result once against oneDNN/OpenBLAS
// or the reference kernels and fails (SkipWithError) when it is wrong.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench_common.h"
#include "summary.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/core/profiler.h"
#include "tandem/version.h"

#if TANDEM_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if TANDEM_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace tandem::bench {
namespace {

// Bytes per triad array: 3 x 256 MiB, past this machine's caches (its triad levels off at DRAM
// speed from ~64 MiB arrays on).
constexpr int64_t kTriadArrayBytes = int64_t{256} << 20;

#if TANDEM_HAVE_DNNL
// The ISA oneDNN dispatches to (its C API has no name function; these enumerators exist in 2.x
// and 3.x).
std::string onednn_isa_name(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa 0x" + [&] {
        char buf[16];
        std::snprintf(buf, sizeof(buf), "%x", static_cast<unsigned>(isa));
        return std::string(buf);
      }();
  }
}
#endif

nlohmann::json peers_json() {
  nlohmann::json peers = nlohmann::json::object();
#if TANDEM_HAVE_DNNL
  const dnnl_version_t* v = dnnl_version();
  peers["onednn"] = {{"version", std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                     std::to_string(v->patch)},
                     {"hash", v->hash ? v->hash : ""},
                     {"effective_cpu_isa", onednn_isa_name(dnnl_get_effective_cpu_isa())}};
#endif
#if TANDEM_HAVE_OPENBLAS
  peers["openblas"] = {{"config", openblas_get_config()}, {"corename", openblas_get_corename()}};
#endif
  return peers;
}

nlohmann::json env_json() {
  nlohmann::json env = nlohmann::json::object();
  for (const char* var : {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS",
                          "OMP_NUM_THREADS", "TANDEM_NUM_THREADS"}) {
    const char* v = std::getenv(var);
    env[var] = v ? nlohmann::json(v) : nlohmann::json(nullptr);
  }
  return env;
}

nlohmann::json device_json() {
  auto& reg = BackendRegistry::global();
  const DeviceInfo info = reg.get(Device::cpu()).device_info(0);
  return {{"name", info.name},
          {"features", info.features},
          {"compute_units", info.compute_units},
          {"memory_bytes", info.memory_bytes}};
}

// The value of --benchmark_format (console when absent); read before benchmark::Initialize eats it.
std::string requested_format(int argc, char** argv) {
  const std::string flag = "--benchmark_format=";
  std::string format = "console";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], flag.c_str(), flag.size()) == 0) format = argv[i] + flag.size();
  }
  return format;
}

std::unique_ptr<benchmark::BenchmarkReporter> make_display(const std::string& format) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  if (format == "csv") return std::make_unique<benchmark::CSVReporter>();
#pragma GCC diagnostic pop
  return std::make_unique<benchmark::ConsoleReporter>(isatty(STDOUT_FILENO)
                                                          ? benchmark::ConsoleReporter::OO_Defaults
                                                          : benchmark::ConsoleReporter::OO_Tabular);
}

// The ceilings come from the library's profiler (the same measurement as `tandem profile`).
ProfileOptions ceiling_options(int threads) {
  ProfileOptions opt;
  opt.threads = threads;
  opt.op_tables = false;
  opt.bandwidth_array_bytes = kTriadArrayBytes;
  return opt;
}

void measure_ceilings() {
  MachineCeilings& c = ceilings();
  c.threads = cpu_num_threads();
  std::fprintf(stderr,
               "tandem_bench_kernels: measuring FMA peak and triad bandwidth (%d threads)\n",
               c.threads);
  c.fma_peak_1t_flops = measure_cpu_fma_peak_flops(1, ceiling_options(1));
  c.fma_peak_nt_flops = c.threads > 1
                            ? measure_cpu_fma_peak_flops(c.threads, ceiling_options(c.threads))
                            : c.fma_peak_1t_flops;
  c.bandwidth_1t_bytes_per_s =
      measure_memory_bandwidth_bytes_per_s(Device::cpu(), ceiling_options(1));
  c.bandwidth_bytes_per_s = c.threads > 1 ? measure_memory_bandwidth_bytes_per_s(
                                                Device::cpu(), ceiling_options(c.threads))
                                          : c.bandwidth_1t_bytes_per_s;
  std::fprintf(stderr,
               "tandem_bench_kernels: FMA peak %.1f GFLOP/s (1 thread), %.1f GFLOP/s (%d threads); "
               "triad %.1f GB/s (1 thread), %.1f GB/s (%d threads)\n",
               c.fma_peak_1t_flops * 1e-9, c.fma_peak_nt_flops * 1e-9, c.threads,
               c.bandwidth_1t_bytes_per_s * 1e-9, c.bandwidth_bytes_per_s * 1e-9, c.threads);
}

void add_context() {
  const MachineCeilings& c = ceilings();
  benchmark::AddCustomContext("tandem_build", build_info_json().dump());
  benchmark::AddCustomContext("tandem_cpu", device_json().dump());
  benchmark::AddCustomContext("peers", peers_json().dump());
  benchmark::AddCustomContext("env", env_json().dump());
  const ProfileOptions opt = ceiling_options(c.threads);
  nlohmann::json ceil = {{"source",
                          "tandem::measure_cpu_fma_peak_flops and "
                          "measure_memory_bandwidth_bytes_per_s, in this process"},
                         {"repeats", opt.repeats},
                         {"threads", c.threads},
                         {"fma_variant", cpu_fma_variant()},
                         {"triad_array_bytes", opt.bandwidth_array_bytes},
                         {"fma_peak_1t_flops", c.fma_peak_1t_flops},
                         {"fma_peak_nt_flops", c.fma_peak_nt_flops},
                         {"triad_1t_bytes_per_s", c.bandwidth_1t_bytes_per_s},
                         {"triad_nt_bytes_per_s", c.bandwidth_bytes_per_s},
                         {"stream_working_set_bytes", kStreamBytes}};
  benchmark::AddCustomContext("ceilings", ceil.dump());
}

}  // namespace
}  // namespace tandem::bench

int main(int argc, char** argv) {
  using namespace tandem::bench;
  const std::string format = requested_format(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    measure_ceilings();
    add_context();
    register_gemm_benchmarks();
    register_conv_benchmarks();
    register_memory_benchmarks();
    register_attention_benchmarks();
    register_cnn_channel_benchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem_bench_kernels: %s\n", e.what());
    return 1;
  }
  CollectingReporter reporter(make_display(format));
  benchmark::RunSpecifiedBenchmarks(&reporter);
  // Keep a JSON/CSV stdout parseable: the summary then goes to stderr.
  reporter.print_summary(format == "console" ? std::cout : std::cerr);
  benchmark::Shutdown();
  return 0;
}
