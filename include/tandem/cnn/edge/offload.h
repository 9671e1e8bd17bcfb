// SPDX-License-Identifier: Apache-2.0
// A CNN split between an edge device and a cloud server, as the pipeline runtime runs it (spec
// cnn.md §3.4 DECC, §4 Neurosurgeon, DADS, edge-only, cloud-only).
//
// What: any edge-cloud plan comes down to the nodes the edge runs, in the order it runs them (a
// set closed under predecessors: data only flows edge -> cloud); everything else runs in the
// cloud. offload_steps() turns that into the two sides' "cnn.split" stage steps (split_stage.cpp):
// the uploads are the tensors the edge computes (or the image) that a cloud node reads, each sent
// once, in the order the edge produces them, as its own micro-packet; the edge's step k computes
// what upload k needs and sends it; the cloud's step k receives upload k and runs every cloud node
// whose inputs have all arrived or been computed, in graph order; its last step also runs what is
// left and sends the model's output. offload_pipeline_plan() wraps them as a two-stage
// sched::PipelinePlan (one stage when the edge runs everything); a request is then one packet per
// step, the image in the first (offload_request).
//
//   std::vector<int> edge = {0, 1, 2};   // node ids in run order
//   auto plan = cnn::edge::offload_pipeline_plan(graph, edge, "m.onnx", "edge", "cloud", "manual");
//   sched::Request r = cnn::edge::offload_request(plan, 7, image);
//
// Throws InvalidArgument naming the node when the edge nodes are not closed under predecessors,
// repeat a node or name one outside the graph. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/cnn/graph.h"
#include "tandem/export.h"
#include "tandem/sched/pipeline.h"
#include "tandem/sched/plan.h"

namespace tandem::cnn::edge {

struct OffloadSteps {
  std::vector<int> uploads;                        // tensor ids, in upload order
  nlohmann::json edge = nlohmann::json::array();   // "cnn.split" steps of the edge side
  nlohmann::json cloud = nlohmann::json::array();  // and of the cloud side (empty: edge-only)
};

TANDEM_API OffloadSteps offload_steps(const Graph& g, const std::vector<int>& edge_nodes);

// The plan: stage 0 on `edge_device` (cnn.split with OffloadSteps::edge), stage 1 on
// `cloud_device` (OffloadSteps::cloud), both {"model": model}; one stage when the edge runs every
// node. extra["offload"] = {"uploads": [tensor names], "steps": n}.
TANDEM_API sched::PipelinePlan offload_pipeline_plan(
    const Graph& g, const std::vector<int>& edge_nodes, const std::string& model,
    const std::string& edge_device, const std::string& cloud_device, const std::string& system);

// The edge-only plan with `steps` steps (the whole model in the first, the output sent in the
// last), so requests made for an offload plan of that many steps run on it unchanged.
TANDEM_API sched::PipelinePlan edge_only_pipeline_plan(const Graph& g, const std::string& model,
                                                       const std::string& edge_device,
                                                       size_t steps);

// A sched::PlanReplanFn (PipelineOptions::replan_plan) for an offload plan: when the cloud is lost
// mid-stream, the frames in flight and every later one run on the edge alone
// (edge_only_pipeline_plan with the current plan's step count), none lost or delivered twice.
// Losing the edge (which holds the frames) throws Infeasible. `g` must outlive the function.
TANDEM_API sched::PlanReplanFn offload_fallback(const Graph& g, const std::string& model,
                                                const std::string& edge_device);

// A request for such a plan: one packet per step, `image` in the first.
TANDEM_API sched::Request offload_request(const sched::PipelinePlan& plan, uint64_t id,
                                          const Tensor& image);

}  // namespace tandem::cnn::edge
