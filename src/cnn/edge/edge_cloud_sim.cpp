// SPDX-License-Identifier: Apache-2.0
// Discrete-event simulation of an edge-cloud plan's schedule (tandem/cnn/edge/edge_cloud.h): the
// edge, the FIFO uplink and the cloud are three servers; each completion event frees its server and
// may let the others start. Written apart from evaluate()'s recurrences so it can check them.
#include <algorithm>
#include <functional>
#include <queue>

#include "tandem/cnn/edge/edge_cloud.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

ScheduleSim simulate_schedule(const EdgeCloudPlan& p, const EdgeCloudProblem& pb) {
  const Graph& g = *pb.graph;
  enum Server { kEdge = 0, kLink = 1, kCloud = 2 };
  struct Event {
    double t;
    int server;
    bool operator>(const Event& o) const { return t > o.t || (t == o.t && server > o.server); }
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  const size_t nt = g.tensors().size();
  std::vector<bool> on_edge(nt, false), in_cloud(nt, false);
  on_edge[static_cast<size_t>(pb.input)] = true;
  size_t next[3] = {0, 0, 0};  // the next item of each server's list
  bool busy[3] = {false, false, false};
  double end[3] = {0, 0, 0};
  ScheduleSim sim;

  auto cloud_can_start = [&](int v) {
    for (int in : g.node(v).inputs)
      if (!in_cloud[static_cast<size_t>(in)]) return false;
    return true;
  };
  // Starts whatever server is idle and has its next item ready at time `now`.
  auto dispatch = [&](double now) {
    if (!busy[kEdge] && next[kEdge] < p.edge_nodes.size()) {
      busy[kEdge] = true;
      events.push({now + pb.edge_s[static_cast<size_t>(p.edge_nodes[next[kEdge]])], kEdge});
    }
    if (!busy[kLink] && next[kLink] < p.uploads.size() &&
        on_edge[static_cast<size_t>(p.uploads[next[kLink]])]) {
      busy[kLink] = true;
      events.push({now + pb.upload_s(p.uploads[next[kLink]]), kLink});
    }
    if (!busy[kCloud] && next[kCloud] < p.cloud_nodes.size() &&
        cloud_can_start(p.cloud_nodes[next[kCloud]])) {
      busy[kCloud] = true;
      events.push({now + pb.cloud_s[static_cast<size_t>(p.cloud_nodes[next[kCloud]])], kCloud});
    }
  };
  dispatch(0);
  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    ++sim.events;
    busy[e.server] = false;
    end[e.server] = e.t;
    if (e.server == kEdge)
      for (int out : g.node(p.edge_nodes[next[kEdge]]).outputs)
        on_edge[static_cast<size_t>(out)] = true;
    else if (e.server == kLink)
      in_cloud[static_cast<size_t>(p.uploads[next[kLink]])] = true;
    else
      for (int out : g.node(p.cloud_nodes[next[kCloud]]).outputs)
        in_cloud[static_cast<size_t>(out)] = true;
    ++next[e.server];
    dispatch(e.t);
  }
  if (next[kEdge] < p.edge_nodes.size() || next[kLink] < p.uploads.size() ||
      next[kCloud] < p.cloud_nodes.size())
    throw InvalidArgument(
        cat("edge-cloud schedule '", p.system, "' cannot finish: ",
            next[kCloud] < p.cloud_nodes.size()
                ? "cloud node '" + g.node(p.cloud_nodes[next[kCloud]]).name +
                      "' waits for an input that never arrives"
                : std::string("an upload waits for a tensor the edge never makes")));
  sim.edge_end_s = end[kEdge];
  sim.link_end_s = end[kLink];
  sim.cloud_end_s = end[kCloud];
  sim.makespan_s = std::max(sim.edge_end_s, sim.cloud_end_s);
  return sim;
}

}  // namespace tandem::cnn::edge
