// SPDX-License-Identifier: Apache-2.0
// The after-run summary of tandem_bench_kernels: a reporter that forwards every result to the usual
// display reporter (console, JSON or CSV) and keeps the per-repetition rates, then markdown tables:
// compute-bound cases with tandem / oneDNN and tandem / OpenBLAS ratios and the share of the FMA
// peak, memory-bound cases with GB/s and the share of the triad bandwidth. Values are the best
// of the repetitions of each benchmark (names follow bench_name():
// "<kind>/<case>/t<threads>/<impl>").
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace tandem::bench {

class CollectingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CollectingReporter(std::unique_ptr<benchmark::BenchmarkReporter> display);
  bool ReportContext(const Context& context) override;
  void ReportRuns(const std::vector<Run>& report) override;
  void Finalize() override;

  // Writes the summary tables (markdown).
  void print_summary(std::ostream& os) const;

 private:
  struct Samples {
    std::vector<double> gflops, gbytes, peak_share, bw_share;
    std::string error;
    int64_t family_index = 0;  // registration order
  };
  std::unique_ptr<benchmark::BenchmarkReporter> display_;
  std::map<std::string, Samples> runs_;  // by name without the "/real_time" suffix
  std::vector<std::string> order_;       // names in registration order (see print_summary)
};

}  // namespace tandem::bench
