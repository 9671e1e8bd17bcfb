// SPDX-License-Identifier: Apache-2.0
// The edge-cloud problem, the evaluator and the plan of an edge set (tandem/cnn/edge/edge_cloud.h).
#include "tandem/cnn/edge/edge_cloud.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {
namespace {

// The whole node as one tile, so any EdgeCostModel prices it.
TileWork node_work(const Graph& g, int id) {
  NodeWork n{.node = id, .flops = static_cast<double>(g.flops(id))};
  for (int t : g.node(id).inputs)
    n.in_bytes += region_bytes(g.tensor(t).shape, full_region(g.tensor(t).shape));
  for (int t : g.node(id).outputs)
    n.out_bytes += region_bytes(g.tensor(t).shape, full_region(g.tensor(t).shape));
  TileWork w;
  w.flops = n.flops;
  w.in_bytes = n.in_bytes;
  w.out_bytes = n.out_bytes;
  w.act_peak_bytes = n.in_bytes + n.out_bytes;
  w.nodes = {n};
  return w;
}

// The side of every node from the plan, checking each node appears once.
std::vector<int> sides(const EdgeCloudPlan& p, const EdgeCloudProblem& pb) {
  std::vector<int> side(static_cast<size_t>(pb.nodes()), -1);  // 0 edge, 1 cloud
  auto place = [&](const std::vector<int>& ids, int s) {
    for (int v : ids) {
      if (v < 0 || v >= pb.nodes())
        throw InvalidArgument(cat("edge-cloud plan '", p.system, "': no node ", v));
      if (side[static_cast<size_t>(v)] != -1)
        throw InvalidArgument(cat("edge-cloud plan '", p.system, "': node '",
                                  pb.graph->node(v).name, "' is listed twice"));
      side[static_cast<size_t>(v)] = s;
    }
  };
  place(p.edge_nodes, 0);
  place(p.cloud_nodes, 1);
  for (int v = 0; v < pb.nodes(); ++v)
    if (side[static_cast<size_t>(v)] == -1)
      throw InvalidArgument(cat("edge-cloud plan '", p.system, "': node '", pb.graph->node(v).name,
                                "' is neither on the edge nor on the cloud"));
  return side;
}

}  // namespace

double EdgeCloudProblem::tensor_bytes(int tensor) const {
  const Shape& s = graph->tensor(tensor).shape;
  return region_bytes(s, full_region(s));
}

EdgeCloudProblem make_edge_cloud_problem(const Graph& g, const ClusterSpec& cluster,
                                         const EdgeCostModel& cost) {
  if (cluster.devices.size() != 2)
    throw InvalidArgument(
        cat("edge-cloud plan: the cluster must have exactly two devices (the edge, "
            "then the cloud), it has ",
            cluster.devices.size()));
  if (g.inputs().size() != 1 || g.outputs().size() != 1)
    throw Unsupported(cat("edge-cloud plan: the model must have one input and one output, it has ",
                          g.inputs().size(), " and ", g.outputs().size(),
                          " (give it a virtual sink first: with_single_output, chain.h)"));
  EdgeCloudProblem pb;
  pb.graph = &g;
  pb.cost = &cost;
  pb.edge = cluster.devices[0];
  pb.cloud = cluster.devices[1];
  for (const DeviceProfile* d : {&pb.edge, &pb.cloud})
    if (!(d->peak_flops > 0) || !std::isfinite(d->peak_flops))
      throw InvalidArgument(cat("edge-cloud plan: device '", d->name,
                                "': peak_flops must be positive, got ", d->peak_flops));
  if (!cluster.has_link(pb.edge.name, pb.cloud.name))
    throw InvalidArgument(
        cat("edge-cloud plan: no link between '", pb.edge.name, "' and '", pb.cloud.name, "'"));
  pb.link = cluster.link(pb.edge.name, pb.cloud.name);
  if (!(pb.link.bandwidth_bytes_per_s > 0) || !std::isfinite(pb.link.bandwidth_bytes_per_s))
    throw InvalidArgument(cat("edge-cloud plan: link ", pb.link.from, " -> ", pb.link.to,
                              ": bandwidth must be positive, got ", pb.link.bandwidth_bytes_per_s,
                              " bytes/s"));
  if (!(pb.link.latency_s >= 0))
    throw InvalidArgument(cat("edge-cloud plan: link ", pb.link.from, " -> ", pb.link.to,
                              ": latency must be >= 0, got ", pb.link.latency_s, " s"));
  pb.input = g.inputs()[0];
  pb.output = g.outputs()[0];
  for (int v = 0; v < static_cast<int>(g.nodes().size()); ++v) {
    const TileWork w = node_work(g, v);
    pb.edge_s.push_back(cost.compute_s(w, pb.edge));
    pb.cloud_s.push_back(cost.compute_s(w, pb.cloud));
  }
  return pb;
}

void evaluate(EdgeCloudPlan& p, const EdgeCloudProblem& pb) {
  const Graph& g = *pb.graph;
  const std::vector<int> side = sides(p, pb);
  const double kNever = std::numeric_limits<double>::infinity();
  const size_t nt = g.tensors().size();
  std::vector<double> on_edge(nt, kNever), arrived(nt, kNever), in_cloud(nt, kNever);
  std::vector<bool> uploaded(nt, false);
  on_edge[static_cast<size_t>(pb.input)] = 0;
  EdgeCloudMetrics m;
  m.planner_s = p.metrics.planner_s;
  double t = 0;
  for (int v : p.edge_nodes) {
    for (int in : g.node(v).inputs)
      if (!std::isfinite(on_edge[static_cast<size_t>(in)]))
        throw InvalidArgument(cat("edge-cloud plan '", p.system, "': edge node '", g.node(v).name,
                                  "' reads '", g.tensor(in).name,
                                  "', which the edge has not produced before it"));
    t += pb.edge_s[static_cast<size_t>(v)];
    for (int out : g.node(v).outputs) on_edge[static_cast<size_t>(out)] = t;
  }
  m.edge_s = t;
  double link = 0;
  for (int ten : p.uploads) {
    if (ten < 0 || ten >= static_cast<int>(nt) || !std::isfinite(on_edge[static_cast<size_t>(ten)]))
      throw InvalidArgument(cat("edge-cloud plan '", p.system, "': upload ", ten,
                                " is not a tensor produced on the edge"));
    if (uploaded[static_cast<size_t>(ten)])
      throw InvalidArgument(cat("edge-cloud plan '", p.system, "': tensor '", g.tensor(ten).name,
                                "' is uploaded twice"));
    uploaded[static_cast<size_t>(ten)] = true;
    link = std::max(link, on_edge[static_cast<size_t>(ten)]) + pb.upload_s(ten);
    arrived[static_cast<size_t>(ten)] = link;
    m.upload_s += pb.upload_s(ten);
    m.bytes_up += pb.tensor_bytes(ten);
  }
  double c = 0;
  std::vector<bool> needed(nt, false);
  for (int v : p.cloud_nodes) {
    double start = c;
    for (int in : g.node(v).inputs) {
      const size_t i = static_cast<size_t>(in);
      const int prod = g.tensor(in).producer;
      const bool from_edge = prod < 0 || side[static_cast<size_t>(prod)] == 0;
      if (from_edge) needed[i] = true;
      const double ready = from_edge ? arrived[i] : in_cloud[i];
      if (!std::isfinite(ready))
        throw InvalidArgument(cat("edge-cloud plan '", p.system, "': cloud node '", g.node(v).name,
                                  "' reads '", g.tensor(in).name, "', which ",
                                  from_edge ? "is never uploaded" : "the cloud computes after it"));
      start = std::max(start, ready);
    }
    c = start + pb.cloud_s[static_cast<size_t>(v)];
    m.cloud_s += pb.cloud_s[static_cast<size_t>(v)];
    for (int out : g.node(v).outputs) in_cloud[static_cast<size_t>(out)] = c;
  }
  for (int ten : p.uploads)
    if (!needed[static_cast<size_t>(ten)])
      throw InvalidArgument(cat("edge-cloud plan '", p.system, "': tensor '", g.tensor(ten).name,
                                "' is uploaded but no cloud node reads it"));
  m.serial_s = m.edge_s + m.upload_s + m.cloud_s;
  m.makespan_s = std::max(t, c);
  p.metrics = m;
}

std::vector<int> runtime_cloud_order(const EdgeCloudProblem& pb, const std::vector<bool>& on_edge,
                                     const std::vector<int>& uploads) {
  const Graph& g = *pb.graph;
  std::vector<bool> have(g.tensors().size(), false), placed(static_cast<size_t>(pb.nodes()), false);
  std::vector<int> order;
  for (size_t k = 0; k < uploads.size();) {
    // One step: the consecutive uploads of one producer (the runtime sends them together).
    const int producer = g.tensor(uploads[k]).producer;
    for (; k < uploads.size() && g.tensor(uploads[k]).producer == producer; ++k)
      have[static_cast<size_t>(uploads[k])] = true;
    for (int v = 0; v < pb.nodes(); ++v) {  // graph order is topological: one pass
      if (on_edge[static_cast<size_t>(v)] || placed[static_cast<size_t>(v)]) continue;
      const auto& ins = g.node(v).inputs;
      if (!std::all_of(ins.begin(), ins.end(), [&](int t) { return have[static_cast<size_t>(t)]; }))
        continue;
      placed[static_cast<size_t>(v)] = true;
      order.push_back(v);
      for (int out : g.node(v).outputs) have[static_cast<size_t>(out)] = true;
    }
  }
  return order;
}

EdgeCloudPlan plan_from_edge_set(const std::string& system, const std::vector<bool>& on_edge,
                                 const EdgeCloudProblem& pb) {
  const Graph& g = *pb.graph;
  if (static_cast<int>(on_edge.size()) != pb.nodes())
    throw InvalidArgument(cat("edge-cloud plan '", system, "': the edge set has ", on_edge.size(),
                              " entries for ", pb.nodes(), " nodes"));
  EdgeCloudPlan p;
  p.system = system;
  for (int v = 0; v < pb.nodes(); ++v)
    if (on_edge[static_cast<size_t>(v)]) p.edge_nodes.push_back(v);
  // Uploads in the order their tensors are produced (the input first).
  auto read_by_cloud = [&](int ten) {
    for (int c : g.tensor(ten).consumers)
      if (!on_edge[static_cast<size_t>(c)]) return true;
    return false;
  };
  if (read_by_cloud(pb.input)) p.uploads.push_back(pb.input);
  for (int v : p.edge_nodes)
    for (int out : g.node(v).outputs)
      if (read_by_cloud(out)) p.uploads.push_back(out);
  p.cloud_nodes = runtime_cloud_order(pb, on_edge, p.uploads);
  evaluate(p, pb);  // also rejects an edge set that is not closed under predecessors
  return p;
}

}  // namespace tandem::cnn::edge
