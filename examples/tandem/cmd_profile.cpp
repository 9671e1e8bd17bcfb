// SPDX-License-Identifier: Apache-2.0
// `tandem profile`: measure this machine and write a DeviceProfile JSON.
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "report.h"
#include "tandem/core/error.h"
#include "tandem/core/profiler.h"

namespace tandem::cli {

int run_profile(const ProfileOptions& o) {
  const Device device = Device::parse(o.device);
  tandem::ProfileOptions opt;
  opt.repeats = o.quick ? 1 : o.repeats;
  opt.min_time_s = o.quick ? 0.02 : opt.min_time_s;
  opt.op_tables = !o.no_tables;
  Progress progress(!o.no_progress);
  opt.progress = [&](const std::string& line) {
    progress.update("profile " + device.to_string() + ": " + line);
  };
  const DeviceProfile p = profile_device(device, opt);
  const std::string text = p.to_json().dump(2);
  if (o.out_path.empty()) {
    std::printf("%s\n", text.c_str());
    return 0;
  }
  std::ofstream f(o.out_path);
  if (!f) throw IoError(cat("cannot write ", o.out_path));
  f << text << "\n";
  if (!f) throw IoError(cat("write failed: ", o.out_path));
  std::printf(
      "| device | GEMM GFLOP/s | memory GB/s | memory GiB | op table entries "
      "|\n|---|---|---|---|---|\n");
  std::printf("| %s | %.1f | %.1f | %.1f | %zu |\n", p.name.c_str(), p.peak_flops / 1e9,
              p.mem_bandwidth_bytes_per_s / 1e9, p.mem_bytes / (1 << 30), p.op_latency_s.size());
  std::printf("\nwrote %s\n", o.out_path.c_str());
  return 0;
}

}  // namespace tandem::cli
