// SPDX-License-Identifier: Apache-2.0
// Edge-cloud split inference: one edge device, one cloud server, one uplink, and a CNN cut between
// them at node granularity (spec cnn.md §3.4, §4: DECC, Neurosurgeon, DADS, edge-only, cloud-only).
//
// What: EdgeCloudProblem prices every node of the graph on the edge and on the cloud through the
// edge cost model (cost.h: a TileWork of the whole node, so the analytic and the per-op models
// both work) and every tensor's upload through EdgeCostModel::transfer_s (t = L + bytes/B). An
// EdgeCloudPlan is what a runtime needs: the edge nodes in execution order (a set closed under
// predecessors: data only flows edge -> cloud), the tensors uploaded in upload order (each once,
// however many cloud nodes read it; the graph input counts as produced on the edge at t = 0) and
// the cloud nodes in execution order. The planners keep the split runtime's conventions
// (offload.h: uploads in the order the edge makes them, cloud order runtime_cloud_order()), so
// offload_pipeline_plan(graph, plan.edge_nodes, ...) runs the schedule evaluate() predicts. Nodes
// are the graph's, not the chain's pieces: DADS and DECC cut inside inception and residual blocks.
//
// How evaluate() predicts (one evaluator for every system): the edge runs its nodes back to back;
// the uplink sends the uploads in order, each when the previous one is done and its tensor has
// been produced (FIFO, busy for L + bytes/B each); the cloud runs its nodes in order, each when
// the previous one is done and its inputs have arrived. T_e, T_t, T_c are the three sums,
// serial_s = T_e + T_t + T_c (what Neurosurgeon and DADS-DSL minimise), makespan_s the pipelined
// end-to-end delay. simulate_schedule() plays the same schedule as discrete events (its check).
//
//   auto pb = cnn::edge::make_edge_cloud_problem(graph, cluster, cost);   // 2 devices, 1 link
//   cnn::edge::EdgeCloudPlan p = cnn::edge::plan_edge_cloud("decc", pb);  // edge_cloud_planners.h
//   fmt::print("{}", cnn::edge::format_table(p, pb));
//
// Thread-safety: plain values; the problem points at the graph and the cost model, which must
// outlive it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/cnn/edge/cost.h"
#include "tandem/cnn/graph.h"
#include "tandem/core/cluster.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

struct TANDEM_API EdgeCloudProblem {
  const Graph* graph = nullptr;
  const EdgeCostModel* cost = nullptr;
  DeviceProfile edge, cloud;
  LinkProfile link;             // the uplink edge -> cloud
  std::vector<double> edge_s;   // per node: seconds on the edge
  std::vector<double> cloud_s;  // per node: seconds on the cloud
  int input = -1, output = -1;  // the graph's single input and output tensors

  int nodes() const { return static_cast<int>(edge_s.size()); }
  double tensor_bytes(int tensor) const;  // f32 bytes of the whole tensor
  double upload_s(int tensor) const { return cost->transfer_s(tensor_bytes(tensor), link); }
};

// The problem for `graph` on `cluster`: exactly two devices (the first is the edge, the second
// the cloud) and a link between them. InvalidArgument naming what is wrong otherwise (device
// count, no link, a bandwidth or peak_flops that is not positive); Unsupported when the graph has
// more than one input or output (load_edge_graph / with_single_output in chain.h give a
// multi-output model its virtual sink). `graph` and `cost` must outlive the problem.
TANDEM_API EdgeCloudProblem make_edge_cloud_problem(const Graph& graph, const ClusterSpec& cluster,
                                                    const EdgeCostModel& cost);

struct EdgeCloudMetrics {
  double edge_s = 0;      // T_e: edge compute
  double upload_s = 0;    // T_t: uplink busy time (Σ L + bytes/B over the uploads)
  double cloud_s = 0;     // T_c: cloud compute
  double serial_s = 0;    // T_e + T_t + T_c: the delay without overlap
  double makespan_s = 0;  // end-to-end delay with uploads and cloud work overlapping the edge
  double bytes_up = 0;    // per frame over the uplink
  double planner_s = 0;   // wall time of the planner
};

struct TANDEM_API EdgeCloudPlan {
  std::string system;                               // "decc", "neurosurgeon", "dads-dsl", ...
  std::vector<int> edge_nodes;                      // node ids, execution order
  std::vector<int> uploads;                         // tensor ids, upload order
  std::vector<int> cloud_nodes;                     // node ids, execution order
  EdgeCloudMetrics metrics{};                       // filled by evaluate()
  nlohmann::json notes = nlohmann::json::object();  // planner specifics

  // `lists`: include the node and tensor names (the runtime's view); else only their counts.
  nlohmann::json to_json(const EdgeCloudProblem& problem, bool lists = true) const;
};

// Checks the plan (every node once, on the edge or the cloud; the edge set closed under
// predecessors and its order topological; every tensor an edge node or the input produces for a
// cloud node uploaded exactly once, nothing else uploaded; the cloud order topological given the
// uploads) and fills plan.metrics (planner_s kept). InvalidArgument naming the node or tensor.
TANDEM_API void evaluate(EdgeCloudPlan& plan, const EdgeCloudProblem& problem);

// The same schedule as a discrete-event simulation (edge, FIFO uplink and cloud as three servers
// reacting to completion events): the makespan and each resource's finish time. evaluate()'s
// check; InvalidArgument when the schedule cannot finish (a cloud node whose input never comes).
struct ScheduleSim {
  double makespan_s = 0;
  double edge_end_s = 0, link_end_s = 0, cloud_end_s = 0;
  int events = 0;
};
TANDEM_API ScheduleSim simulate_schedule(const EdgeCloudPlan& plan,
                                         const EdgeCloudProblem& problem);

// The cloud order the split runtime runs (offload.h, cnn.split): after each step of uploads (the
// consecutive uploads of one producer), in upload order, every cloud node whose inputs are all in
// the cloud, in graph order. Nodes that never get their inputs are left out (evaluate() names
// them).
TANDEM_API std::vector<int> runtime_cloud_order(const EdgeCloudProblem& problem,
                                                const std::vector<bool>& on_edge,
                                                const std::vector<int>& uploads);

// The plan that runs exactly `on_edge` (per node; closed under predecessors) on the edge: edge
// nodes in graph order, uploads as their tensors are produced, cloud nodes in
// runtime_cloud_order. Evaluated. What a cut-based planner returns.
TANDEM_API EdgeCloudPlan plan_from_edge_set(const std::string& system,
                                            const std::vector<bool>& on_edge,
                                            const EdgeCloudProblem& problem);

// A markdown table: the nodes on each side, the uploads and the predicted times.
TANDEM_API std::string format_table(const EdgeCloudPlan& plan, const EdgeCloudProblem& problem);

}  // namespace tandem::cnn::edge
