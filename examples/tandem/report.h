// SPDX-License-Identifier: Apache-2.0
// What every machine-readable record of the tool carries besides build_info_json(): the system
// description, sample statistics; plus the stderr progress line (only on a terminal).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tandem::cli {

nlohmann::json system_json();  // CPU model, features, threads, memory, GPUs, OPENBLAS_* environment

struct SampleStats {
  double mean = 0, stddev = 0, p50 = 0, p99 = 0, min = 0;
};
SampleStats stats_of(std::vector<double> samples);

// A one-line "\r" progress message on stderr when stderr is a terminal and progress is enabled.
class Progress {
 public:
  explicit Progress(bool enabled);
  ~Progress();
  void update(const std::string& line);

 private:
  bool enabled_;
  size_t last_len_ = 0;
};

}  // namespace tandem::cli
