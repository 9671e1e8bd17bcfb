// SPDX-License-Identifier: Apache-2.0
#include "report.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "tandem/core/backend.h"

namespace tandem::cli {

nlohmann::json system_json() {
  auto& reg = BackendRegistry::global();
  nlohmann::json devices = nlohmann::json::array();
  for (const Device& d : reg.devices()) {
    const DeviceInfo info = reg.get(d).device_info(d.index);
    devices.push_back({{"device", d.to_string()},
                       {"name", info.name},
                       {"memory_bytes", info.memory_bytes},
                       {"compute_units", info.compute_units},
                       {"features", info.features}});
  }
  nlohmann::json env = nlohmann::json::object();
  for (const char* var :
       {"OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "TANDEM_NUM_THREADS"}) {
    if (const char* v = std::getenv(var)) env[var] = v;
  }
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return {{"hostname", host},
          {"devices", devices},
          {"cpu_threads_used", cpu_num_threads()},
          {"env", env}};
}

SampleStats stats_of(std::vector<double> v) {
  SampleStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - s.mean) * (x - s.mean);
  s.stddev = v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0;
  auto pct = [&](double p) {
    const double idx = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(idx)), hi = static_cast<size_t>(std::ceil(idx));
    return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
  };
  s.p50 = pct(0.5);
  s.p99 = pct(0.99);
  s.min = v.front();
  return s;
}

Progress::Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

Progress::~Progress() {
  if (enabled_ && last_len_) std::fprintf(stderr, "\r%*s\r", static_cast<int>(last_len_), "");
}

void Progress::update(const std::string& line) {
  if (!enabled_) return;
  const size_t pad = last_len_ > line.size() ? last_len_ - line.size() : 0;
  std::fprintf(stderr, "\r%s%*s", line.c_str(), static_cast<int>(pad), "");
  std::fflush(stderr);
  last_len_ = line.size();
}

}  // namespace tandem::cli
