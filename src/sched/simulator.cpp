// SPDX-License-Identifier: Apache-2.0
// simulate_pipeline: an event queue over task completions (see simulator.h). Resources are the
// devices (compute) and the stage boundaries (links); each keeps a ready queue ordered by readiness
// time, then packet, then stage; a resource starts its next task whenever it is idle.
#include "tandem/sched/simulator.h"

#include <algorithm>
#include <cmath>
#include <queue>
#include <tuple>

#include "tandem/core/error.h"

namespace tandem::sched {
namespace {

struct Ready {
  double ready_s;
  int packet;
  int stage;
  bool operator>(const Ready& o) const {
    return std::tie(ready_s, packet, stage) > std::tie(o.ready_s, o.packet, o.stage);
  }
};
using ReadyQueue = std::priority_queue<Ready, std::vector<Ready>, std::greater<>>;

struct Event {
  double time_s;
  int resource;  // devices first, then links
  int packet;
  int stage;
  bool operator>(const Event& o) const {
    return std::tie(time_s, resource, packet) > std::tie(o.time_s, o.resource, o.packet);
  }
};

void check_value(double v, const char* what, size_t p, size_t j) {
  if (!(v >= 0) || !std::isfinite(v)) {
    throw InvalidArgument(cat("simulate_pipeline: ", what, "[", p, "][", j, "] = ", v,
                              " (need a finite value >= 0)"));
  }
}

}  // namespace

PipelineSimResult simulate_pipeline(const PipelineSimInput& in) {
  const size_t n_packets = in.compute_s.size();
  if (n_packets == 0) throw InvalidArgument("simulate_pipeline: no packets");
  const size_t n_stages = in.compute_s[0].size();
  if (n_stages == 0) throw InvalidArgument("simulate_pipeline: no stages");
  if (in.transfer_s.size() != n_packets) {
    throw InvalidArgument(cat("simulate_pipeline: transfer_s has ", in.transfer_s.size(),
                              " packets, compute_s ", n_packets));
  }
  for (size_t p = 0; p < n_packets; ++p) {
    if (in.compute_s[p].size() != n_stages || in.transfer_s[p].size() != n_stages - 1) {
      throw InvalidArgument(cat("simulate_pipeline: packet ", p, " has ", in.compute_s[p].size(),
                                " stage times and ", in.transfer_s[p].size(),
                                " transfer times (need ", n_stages, " and ", n_stages - 1, ")"));
    }
    for (size_t j = 0; j < n_stages; ++j) check_value(in.compute_s[p][j], "compute_s", p, j);
    for (size_t j = 0; j + 1 < n_stages; ++j) check_value(in.transfer_s[p][j], "transfer_s", p, j);
  }
  if (!in.stage_device.empty() && in.stage_device.size() != n_stages) {
    throw InvalidArgument(cat("simulate_pipeline: stage_device has ", in.stage_device.size(),
                              " entries for ", n_stages, " stages"));
  }
  std::vector<int> dev(n_stages);
  int n_devices = 0;
  for (size_t j = 0; j < n_stages; ++j) {
    dev[j] = in.stage_device.empty() ? static_cast<int>(j) : in.stage_device.at(j);
    if (dev[j] < 0)
      throw InvalidArgument(cat("simulate_pipeline: stage ", j, " on device ", dev[j]));
    n_devices = std::max(n_devices, dev[j] + 1);
  }
  if (!in.release_s.empty() && in.release_s.size() != n_packets) {
    throw InvalidArgument(cat("simulate_pipeline: release_s has ", in.release_s.size(),
                              " entries for ", n_packets, " packets"));
  }
  const int n_links = static_cast<int>(n_stages) - 1;
  const int n_res = n_devices + n_links;
  std::vector<ReadyQueue> ready(n_res);
  std::vector<char> busy(n_res, 0);
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;

  PipelineSimResult r;
  r.packet_done_s.assign(n_packets, 0.0);
  r.device_busy_s.assign(n_devices, 0.0);
  r.link_busy_s.assign(n_links, 0.0);
  r.stage_first_start_s.assign(n_stages, -1.0);
  std::vector<double> task_start(n_res, 0.0);

  auto try_start = [&](int res, double now) {
    if (busy[res] || ready[res].empty()) return;
    const Ready t = ready[res].top();
    ready[res].pop();
    const double start = std::max(now, t.ready_s);
    const bool is_link = res >= n_devices;
    const double dur = is_link ? in.transfer_s[t.packet][t.stage] : in.compute_s[t.packet][t.stage];
    busy[res] = 1;
    task_start[res] = start;
    if (!is_link && r.stage_first_start_s[t.stage] < 0) r.stage_first_start_s[t.stage] = start;
    events.push({start + dur, res, t.packet, t.stage});
  };
  for (size_t p = 0; p < n_packets; ++p) {
    ready[dev[0]].push({in.release_s.empty() ? 0.0 : in.release_s[p], static_cast<int>(p), 0});
  }
  for (int res = 0; res < n_res; ++res) try_start(res, 0.0);
  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    ++r.events;
    const bool is_link = e.resource >= n_devices;
    busy[e.resource] = 0;
    const double dur = e.time_s - task_start[e.resource];
    r.timeline.push_back({e.packet, e.stage, is_link, task_start[e.resource], e.time_s});
    if (is_link) {
      r.link_busy_s[e.stage] += dur;
      ready[dev[e.stage + 1]].push({e.time_s, e.packet, e.stage + 1});
      try_start(dev[e.stage + 1], e.time_s);
    } else {
      r.device_busy_s[e.resource] += dur;
      if (e.stage + 1 == static_cast<int>(n_stages)) {
        r.packet_done_s[e.packet] = e.time_s;
      } else if (dev[e.stage + 1] == dev[e.stage]) {  // same device: no transfer
        ready[dev[e.stage]].push({e.time_s, e.packet, e.stage + 1});
      } else {
        const int link = n_devices + e.stage;
        ready[link].push({e.time_s, e.packet, e.stage});
        try_start(link, e.time_s);
      }
    }
    r.makespan_s = std::max(r.makespan_s, e.time_s);
    try_start(e.resource, e.time_s);
  }
  return r;
}

double bubble_fraction(const PipelineSimResult& result, int device) {
  if (device < 0 || device >= static_cast<int>(result.device_busy_s.size())) {
    throw InvalidArgument(cat("bubble_fraction: no device ", device));
  }
  if (result.makespan_s <= 0) return 0.0;
  return 1.0 - result.device_busy_s[device] / result.makespan_s;
}

}  // namespace tandem::sched
