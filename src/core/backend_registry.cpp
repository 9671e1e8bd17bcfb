// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

namespace tandem {

namespace {

// Folder holding libtandem.so, where backend modules are installed beside it.
std::filesystem::path library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_dir), &info) && info.dli_fname)
    return std::filesystem::path(info.dli_fname).parent_path();
  return {};
}

void load_default_modules(BackendRegistry& reg) {
  std::vector<std::filesystem::path> candidates;
  if (const char* env = std::getenv("TANDEM_BACKEND_PATH"); env && *env) {
    candidates.emplace_back(env);
  } else {
    candidates.push_back(library_dir() / "libtandem_cuda.so");
  }
  for (const auto& path : candidates) {
    if (!std::filesystem::exists(path)) {
      log().debug("no backend module at {}", path.string());
      continue;
    }
    std::string err;
    if (!reg.load_module(path.string(), &err)) log().warn("{}", err);
  }
}

}  // namespace

BackendRegistry& BackendRegistry::global() {
  static BackendRegistry* reg = [] {
    auto* r =
        new BackendRegistry();  // leaked: backends must outlive every static that holds tensors
    r->add(make_cpu_backend());
    load_default_modules(*r);
    return r;
  }();
  return *reg;
}

static_assert(static_cast<int>(DeviceType::kCuda) == 1, "by_type_ has one slot per DeviceType");

void BackendRegistry::add(std::unique_ptr<Backend> backend) {
  TANDEM_CHECK(backend) << "null backend";
  const auto slot = static_cast<size_t>(backend->type());
  TANDEM_CHECK(slot < by_type_.size()) << "device type " << slot << " has no registry slot";
  std::lock_guard lk(mu_);
  backends_.push_back(std::move(backend));
  by_type_[slot].store(backends_.back().get(), std::memory_order_release);
}

Backend* BackendRegistry::find(DeviceType type) const {
  const auto slot = static_cast<size_t>(type);
  return slot < by_type_.size() ? by_type_[slot].load(std::memory_order_acquire) : nullptr;
}

Backend& BackendRegistry::get(Device device) const {
  Backend* b = find(device.type);
  if (!b) {
    std::string why =
        cat("no ", device_type_name(device.type), " backend in this build or process");
    std::lock_guard lk(mu_);
    for (auto& e : load_errors_) why += cat("; ", e);
    throw NotFound(cat("device ", device.to_string(), ": ", why));
  }
  if (device.index < 0 || device.index >= b->device_count()) {
    const std::string reason = b->unavailable_reason();
    throw NotFound(cat("device ", device.to_string(), " does not exist (", b->device_count(), " ",
                       b->name(), " device(s)", reason.empty() ? "" : ": " + reason, ")"));
  }
  return *b;
}

std::vector<Backend*> BackendRegistry::backends() const {
  std::vector<Backend*> out;  // the current backend of each type, in DeviceType order
  for (const auto& b : by_type_)
    if (Backend* p = b.load(std::memory_order_acquire)) out.push_back(p);
  return out;
}

std::vector<Device> BackendRegistry::devices() const {
  std::vector<Device> out;
  for (Backend* b : backends()) {
    for (int i = 0; i < b->device_count(); ++i) out.push_back(Device{b->type(), i});
  }
  return out;
}

std::vector<std::string> BackendRegistry::load_errors() const {
  std::lock_guard lk(mu_);
  return load_errors_;
}

bool BackendRegistry::load_module(const std::string& path, std::string* error) {
  auto fail = [&](const std::string& msg) {
    std::lock_guard lk(mu_);
    load_errors_.push_back(msg);
    if (error) *error = msg;
    return false;
  };
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) return fail(cat("cannot load backend module ", path, ": ", dlerror()));
  auto create = reinterpret_cast<tandem_backend_create_fn>(dlsym(handle, "tandem_backend_create"));
  if (!create) return fail(cat("backend module ", path, " has no tandem_backend_create"));
  try {
    std::unique_ptr<Backend> backend(create());
    if (!backend) return fail(cat("backend module ", path, " returned no backend"));
    log().debug("loaded backend '{}' from {} ({} devices)", backend->name(), path,
                backend->device_count());
    add(std::move(backend));
  } catch (const std::exception& e) {
    return fail(cat("backend module ", path, " failed to start: ", e.what()));
  }
  return true;  // the handle stays open for the life of the process
}

std::unique_ptr<Stream> create_stream(Device device) {
  return BackendRegistry::global().get(device).create_stream(device.index);
}

std::unique_ptr<Event> create_event(Device device) {
  return BackendRegistry::global().get(device).create_event(device.index);
}

}  // namespace tandem
