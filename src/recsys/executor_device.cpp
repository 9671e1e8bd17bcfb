// SPDX-License-Identifier: Apache-2.0
// DeviceExecutor: executor streams as (host issue queue, device stream) pairs; see executor.h.
#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/recsys/executor.h"

namespace tandem::rec {

DeviceExecutor::DeviceExecutor(Device device, DeviceProfile profile)
    : device_(device), profile_(std::move(profile)) {
  // Fails early (NotFound / Unsupported from the registry) when the device is absent.
  (void)BackendRegistry::global().get(device);
}

DeviceExecutor::~DeviceExecutor() {
  try {
    synchronize();
  } catch (...) {  // errors were reported to the queries' promises
  }
}

int DeviceExecutor::create_stream(int /*priority*/) {
  auto l = std::make_unique<Lane>();
  l->host = tandem::create_stream(Device::cpu());
  l->device = tandem::create_stream(device_);
  std::lock_guard lk(mu_);
  lanes_.push_back(std::move(l));
  return static_cast<int>(lanes_.size()) - 1;
}

int DeviceExecutor::num_streams() const {
  std::lock_guard lk(mu_);
  return static_cast<int>(lanes_.size());
}

DeviceExecutor::Lane& DeviceExecutor::lane(int id) const {
  std::lock_guard lk(mu_);
  if (id < 0 || id >= static_cast<int>(lanes_.size()))
    throw InvalidArgument(cat("DeviceExecutor(", device_.to_string(), "): no stream ", id, " (",
                              lanes_.size(), " created)"));
  return *lanes_[id];
}

std::shared_ptr<Event> DeviceExecutor::create_event() {
  return std::shared_ptr<Event>(tandem::create_event(Device::cpu()));
}

void DeviceExecutor::launch(int s, const OpInstance& op, LaunchLimits limits) {
  Tracer* tracer = tracer_;
  Lane& l = lane(s);
  Stream* dev = l.device.get();
  l.host->launch([op, limits, tracer, s, dev] {
    if (op.state->error) return;
    const auto t0 = Clock::now();
    try {
      op.model->run_node(op.node, *op.state, limits.max_units, dev);
      if (tracer) dev->synchronize();
    } catch (...) {
      op.state->error = std::current_exception();
    }
    if (tracer)
      tracer->add(op.model->node_name(op.node), op.category, op.query_id, s, t0, Clock::now());
  });
}

void DeviceExecutor::host(int s, std::function<void()> fn) {
  Lane& l = lane(s);
  Stream* dev = l.device.get();
  l.host->launch([dev, fn = std::move(fn)] {
    dev->synchronize();
    fn();
  });
}

void DeviceExecutor::record(Event& e, int s) {
  Lane& l = lane(s);
  Stream* dev = l.device.get();
  l.host->launch([dev] { dev->synchronize(); });
  l.host->record(e);
}

void DeviceExecutor::wait(int s, Event& e) { lane(s).host->wait(e); }
bool DeviceExecutor::done(Event& e) { return e.query(); }

void* DeviceExecutor::alloc_async(size_t bytes, int s) {
  (void)lane(s);
  return allocator(device_).allocate(bytes);
}

void DeviceExecutor::free_async(void* ptr, size_t bytes, int s) {
  Lane& l = lane(s);
  Stream* dev = l.device.get();
  const Device d = device_;
  l.host->launch([dev, d, ptr, bytes] {
    dev->synchronize();
    allocator(d).deallocate(ptr, bytes);
  });
}

ExecutorInfo DeviceExecutor::info() const {
  ExecutorInfo i;
  i.capacity = i.parallel_units = 1;  // one device
  i.device = profile_;
  return i;
}

void DeviceExecutor::synchronize() {
  std::vector<Lane*> all;
  {
    std::lock_guard lk(mu_);
    for (auto& l : lanes_) all.push_back(l.get());
  }
  for (Lane* l : all) {
    l->host->synchronize();
    l->device->synchronize();
  }
}

}  // namespace tandem::rec
