// SPDX-License-Identifier: Apache-2.0
// measured_profile (executor.h): this machine's DeviceProfile per device, measured once.
#include <map>
#include <memory>
#include <mutex>

#include "tandem/core/profiler.h"
#include "tandem/recsys/executor.h"

namespace tandem::rec {

const DeviceProfile& measured_profile(Device device) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<const DeviceProfile>> cache;
  std::lock_guard lock(mu);
  auto& slot = cache[device.to_string()];
  if (!slot) {
    // Peaks only: the op tables take ~10 s and the recsys cost classes do not read them.
    ProfileOptions opt;
    opt.repeats = 3;
    opt.min_time_s = 0.02;
    opt.op_tables = false;
    opt.gemm_sizes = {256, 512};
    slot = std::make_unique<const DeviceProfile>(profile_device(device, opt));
  }
  return *slot;
}

}  // namespace tandem::rec
