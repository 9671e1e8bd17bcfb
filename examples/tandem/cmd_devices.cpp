// SPDX-License-Identifier: Apache-2.0
// `tandem devices`: every usable device, and why a compiled backend has none.
#include <cstdio>

#include "commands.h"
#include "report.h"
#include "tandem/core/backend.h"
#include "tandem/core/build_info.h"
#include "tandem/version.h"

namespace tandem::cli {

int run_devices(const DevicesOptions& o) {
  auto& reg = BackendRegistry::global();
  nlohmann::json backends = nlohmann::json::array();
  for (Backend* b : reg.backends()) {
    backends.push_back({{"backend", b->name()},
                        {"devices", b->device_count()},
                        {"unavailable_reason", b->unavailable_reason()}});
  }
  const bool cuda_loaded = reg.find(DeviceType::kCuda) != nullptr;
  if (o.output == "json") {
    nlohmann::json j = {{"schema_version", 1},
                        {"build", build_info_json()},
                        {"system", system_json()},
                        {"backends", backends},
                        {"load_errors", reg.load_errors()}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("| device | name | memory | compute units | features |\n|---|---|---|---|---|\n");
  for (const Device& d : reg.devices()) {
    const DeviceInfo info = reg.get(d).device_info(d.index);
    std::printf("| %s | %s | %.1f GiB | %d | %s |\n", d.to_string().c_str(), info.name.c_str(),
                static_cast<double>(info.memory_bytes) / (1 << 30), info.compute_units,
                info.features.c_str());
  }
  std::printf("\n");
  for (Backend* b : reg.backends()) {
    std::printf("backend %-5s %d device(s)%s%s\n", b->name().c_str(), b->device_count(),
                b->unavailable_reason().empty() ? "" : ": ", b->unavailable_reason().c_str());
  }
  if (!cuda_loaded) {
    std::printf("backend cuda  not loaded: %s\n", TANDEM_WITH_CUDA_MODULE
                                                      ? "libtandem_cuda.so could not be loaded"
                                                      : "built with TANDEM_CUDA=OFF");
  }
  for (const auto& e : reg.load_errors()) std::printf("  %s\n", e.c_str());
  return 0;
}

}  // namespace tandem::cli
