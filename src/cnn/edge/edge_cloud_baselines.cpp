// SPDX-License-Identifier: Apache-2.0
// Neurosurgeon, edge-only, cloud-only and the edge-cloud planners by name
// (tandem/cnn/edge/edge_cloud_planners.h).
#include <chrono>
#include <limits>

#include "core/clock.h"
#include "tandem/cnn/edge/edge_cloud_planners.h"
#include "tandem/core/error.h"

namespace tandem::cnn::edge {

EdgeCloudPlan plan_neurosurgeon(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  const Graph& g = *pb.graph;
  const int n = pb.nodes();
  // Split k: nodes < k on the edge. A tensor made by node p (the input: p = -1) and last read by
  // node q crosses the cut for every k in (p, q], so its upload is added over that range.
  std::vector<double> upload(static_cast<size_t>(n) + 2, 0);  // difference array over k
  for (int ten = 0; ten < static_cast<int>(g.tensors().size()); ++ten) {
    const TensorInfo& t = g.tensor(ten);
    if (t.consumers.empty() || (t.producer < 0 && ten != pb.input)) continue;
    int last = t.consumers.front();
    for (int u : t.consumers) last = std::max(last, u);
    upload[static_cast<size_t>(t.producer + 1)] += pb.upload_s(ten);
    upload[static_cast<size_t>(last + 1)] -= pb.upload_s(ten);
  }
  double cloud = 0;
  for (double c : pb.cloud_s) cloud += c;
  double edge = 0, crossing = 0, best = std::numeric_limits<double>::infinity();
  int best_k = 0;
  for (int k = 0; k <= n; ++k) {
    crossing += upload[static_cast<size_t>(k)];
    const double lat = edge + crossing + cloud;
    if (lat < best) best = lat, best_k = k;
    if (k < n) {
      edge += pb.edge_s[static_cast<size_t>(k)];
      cloud -= pb.cloud_s[static_cast<size_t>(k)];
    }
  }
  std::vector<bool> on_edge(static_cast<size_t>(n), false);
  for (int v = 0; v < best_k; ++v) on_edge[static_cast<size_t>(v)] = true;
  EdgeCloudPlan p = plan_from_edge_set("neurosurgeon", on_edge, pb);
  p.notes = {{"split_after", best_k == 0 ? "input" : g.node(best_k - 1).name},
             {"split_index", best_k},
             {"objective_s", best}};
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

EdgeCloudPlan plan_edge_only(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  EdgeCloudPlan p =
      plan_from_edge_set("edge-only", std::vector<bool>(static_cast<size_t>(pb.nodes()), true), pb);
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

EdgeCloudPlan plan_cloud_only(const EdgeCloudProblem& pb) {
  const auto t0 = std::chrono::steady_clock::now();
  EdgeCloudPlan p = plan_from_edge_set(
      "cloud-only", std::vector<bool>(static_cast<size_t>(pb.nodes()), false), pb);
  p.metrics.planner_s = seconds_since(t0);
  return p;
}

const std::vector<std::string>& edge_cloud_system_names() {
  static const std::vector<std::string> kNames = {
      "decc", "neurosurgeon", "dads", "dads-dsl", "dads-dsh", "edge-only", "cloud-only"};
  return kNames;
}

EdgeCloudPlan plan_edge_cloud(const std::string& system, const EdgeCloudProblem& pb) {
  if (system == "decc") return plan_decc(pb);
  if (system == "neurosurgeon") return plan_neurosurgeon(pb);
  if (system == "dads") return plan_dads(pb);
  if (system == "dads-dsl") return plan_dads_dsl(pb);
  if (system == "dads-dsh") return plan_dads_dsh(pb);
  if (system == "edge-only") return plan_edge_only(pb);
  if (system == "cloud-only") return plan_cloud_only(pb);
  std::string known;
  for (const std::string& s : edge_cloud_system_names()) known += (known.empty() ? "" : ", ") + s;
  throw InvalidArgument(cat("edge-cloud plan: unknown system '", system, "' (known: ", known, ")"));
}

}  // namespace tandem::cnn::edge
