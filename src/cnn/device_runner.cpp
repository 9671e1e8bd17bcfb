// SPDX-License-Identifier: Apache-2.0
// The registry of CNN device runners (tandem/cnn/device_runner.h).
#include "tandem/cnn/device_runner.h"

#include <map>
#include <mutex>

#include "tandem/core/backend.h"

namespace tandem::cnn {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

std::map<DeviceType, DeviceRunnerFactory>& registry() {
  static auto* r = new std::map<DeviceType, DeviceRunnerFactory>();  // outlives module unloads
  return *r;
}

}  // namespace

void register_device_runner(DeviceType type, DeviceRunnerFactory factory) {
  std::lock_guard lk(registry_mutex());
  registry()[type] = factory;
}

DeviceRunnerFactory find_device_runner(DeviceType type) {
  BackendRegistry::global();  // loads the backend modules, which register their runners
  std::lock_guard lk(registry_mutex());
  auto it = registry().find(type);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace tandem::cnn
