// SPDX-License-Identifier: Apache-2.0
// Emulated devices and links (emulation.h).
#include "tandem/sched/emulation.h"

#include "tandem/core/cost_model.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "tandem/core/backend.h"
#include "tandem/core/error.h"

namespace tandem::sched {
namespace {

using Clock = std::chrono::steady_clock;

void sleep_s(double s) {
  if (s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

// CPU seconds the calling thread has run so far.
double thread_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace

double EmulatedDevice::emulated_s(double elapsed_s) const {
  return on_device_s(elapsed_s, speed_factor);
}

Packet EmulatedDevice::process_timed(Stage& stage, Packet in, double* elapsed_s,
                                     double* busy_s) const {
  const int saved = cpu_num_threads();
  if (threads > 0 && threads != saved) set_cpu_num_threads(threads);
  const double cpu0 = thread_cpu_s();
  const auto t0 = Clock::now();
  Packet out;
  try {
    out = stage.process(std::move(in));
  } catch (...) {
    if (threads > 0 && threads != saved) set_cpu_num_threads(saved);
    throw;
  }
  *elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // One thread: the kernels ran on this thread (an OpenMP team of one), so its CPU time is the
  // work itself, without the time other processes held the core. Otherwise the wall time.
  *busy_s = threads == 1 ? std::min(*elapsed_s, thread_cpu_s() - cpu0) : *elapsed_s;
  if (threads > 0 && threads != saved) set_cpu_num_threads(saved);
  return out;
}

Packet EmulatedDevice::run(Stage& stage, Packet in, double* compute_s) const {
  double elapsed = 0, busy = 0;
  Packet out = process_timed(stage, std::move(in), &elapsed, &busy);
  const double stretch = std::max(0.0, emulated_s(busy) - elapsed);
  sleep_s(stretch);
  if (compute_s) *compute_s = elapsed + stretch;
  return out;
}

Packet EmulatedDevice::measure(Stage& stage, Packet in, double* compute_s) const {
  double elapsed = 0, busy = 0;
  Packet out = process_timed(stage, std::move(in), &elapsed, &busy);
  if (compute_s) *compute_s = emulated_s(busy);
  return out;
}

nlohmann::json EmulatedDevice::to_json() const {
  return {{"threads", threads}, {"speed_factor", speed_factor}};
}

EmulatedDevice EmulatedDevice::from_profile(const DeviceProfile& d) {
  EmulatedDevice e;
  e.threads = d.threads;
  e.speed_factor = d.speed_factor;
  if (!(e.speed_factor > 0))
    throw InvalidArgument("device '" + d.name + "': speed_factor must be positive");
  return e;
}

EmulatedDevice EmulatedDevice::from_json(const nlohmann::json& j) {
  EmulatedDevice e;
  if (!j.is_object()) throw InvalidArgument("emulated device: expected a JSON object");
  if (j.contains("threads")) {
    if (!j["threads"].is_number_integer() || j["threads"].get<int64_t>() < 0 ||
        j["threads"].get<int64_t>() > 4096)
      throw InvalidArgument("emulated device: \"threads\" must be an integer in [0, 4096]");
    e.threads = j["threads"].get<int>();
  }
  if (j.contains("speed_factor")) {
    if (!j["speed_factor"].is_number() || !(j["speed_factor"].get<double>() > 0) ||
        j["speed_factor"].get<double>() > 1e6)
      throw InvalidArgument("emulated device: \"speed_factor\" must be a positive number");
    e.speed_factor = j["speed_factor"].get<double>();
  }
  return e;
}

EmulatedLink::EmulatedLink(const LinkProfile& profile, const LinkFaults& faults)
    : profile_(profile), faults_(faults), rng_(faults.seed) {
  if (!(profile.bandwidth_bytes_per_s > 0) || profile.latency_s < 0)
    throw InvalidArgument("emulated link " + profile.from + " -> " + profile.to +
                          ": needs a positive bandwidth and a non-negative latency");
  if (faults.drop < 0 || faults.drop >= 1 || faults.jitter_s < 0 || faults.retransmit_timeout_s < 0)
    throw InvalidArgument("emulated link " + profile.from + " -> " + profile.to +
                          ": drop must be in [0, 1), jitter and timeout non-negative");
}

EmulatedLink::Cost EmulatedLink::plan_transmit(uint64_t bytes) {
  Cost c;
  const double rto = faults_.retransmit_timeout_s > 0 ? faults_.retransmit_timeout_s
                                                      : 2 * profile_.latency_s + 1e-3;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (;;) {
    double d = profile_.latency_s + static_cast<double>(bytes) / profile_.bandwidth_bytes_per_s;
    if (faults_.jitter_s > 0) d = std::max(0.0, d + (2 * u(rng_) - 1) * faults_.jitter_s);
    if (faults_.drop > 0 && u(rng_) < faults_.drop) {
      c.delay_s += rto;  // the copy is lost; the sender notices after its ack timeout
      ++c.attempts;
      continue;
    }
    c.delay_s += d;
    return c;
  }
}

EmulatedLink::Cost EmulatedLink::transmit(uint64_t bytes) {
  Cost c = plan_transmit(bytes);
  sleep_s(c.delay_s);
  messages_ += 1;
  bytes_ += bytes;
  drops_ += static_cast<uint64_t>(c.attempts - 1);
  delay_ns_ += static_cast<uint64_t>(c.delay_s * 1e9);
  return c;
}

LinkCounters EmulatedLink::counters() const {
  return {messages_.load(), bytes_.load(), drops_.load(),
          static_cast<double>(delay_ns_.load()) * 1e-9};
}

}  // namespace tandem::sched
