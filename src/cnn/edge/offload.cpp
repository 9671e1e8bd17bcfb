// SPDX-License-Identifier: Apache-2.0
// An edge/cloud node split as the runtime's cnn.split steps (tandem/cnn/edge/offload.h).
#include "tandem/cnn/edge/offload.h"

#include <algorithm>
#include <set>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {
namespace {

nlohmann::json tensor_names(const Graph& g, const std::vector<int>& ids) {
  nlohmann::json names = nlohmann::json::array();
  for (int t : ids) names.push_back(g.tensor(t).name);
  return names;
}

nlohmann::json node_names(const Graph& g, const std::vector<int>& ids) {
  nlohmann::json names = nlohmann::json::array();
  for (int id : ids) names.push_back(g.node(id).name);
  return names;
}

// Checks the edge nodes (in range, once each, every producer of an input on the edge and earlier).
void check_edge_nodes(const Graph& g, const std::vector<int>& edge_nodes) {
  std::set<int> seen;
  for (int id : edge_nodes) {
    if (id < 0 || id >= static_cast<int>(g.nodes().size()))
      throw InvalidArgument(cat("offload: node id ", id, " is not in the graph"));
    if (!seen.insert(id).second)
      throw InvalidArgument(cat("offload: node '", g.node(id).name, "' is on the edge twice"));
    for (int t : g.node(id).inputs) {
      const int p = g.tensor(t).producer;
      if (p >= 0 && !seen.count(p))
        throw InvalidArgument(cat("offload: edge node '", g.node(id).name, "' reads '",
                                  g.tensor(t).name, "' from '", g.node(p).name,
                                  "', which is not on the edge before it (data only flows edge -> "
                                  "cloud)"));
    }
  }
}

}  // namespace

OffloadSteps offload_steps(const Graph& g, const std::vector<int>& edge_nodes) {
  if (g.inputs().size() != 1 || g.outputs().size() != 1)
    throw Unsupported("offload: a model with one input and one output (with_single_output)");
  check_edge_nodes(g, edge_nodes);
  const std::set<int> on_edge(edge_nodes.begin(), edge_nodes.end());
  const int image = g.inputs()[0], output = g.outputs()[0];
  // A tensor is uploaded when the edge has it (the image, or an edge node's output) and a cloud
  // node reads it; the output too when it is computed on the edge but the cloud runs something.
  auto uploaded = [&](int t) {
    for (int c : g.tensor(t).consumers)
      if (!on_edge.count(c)) return true;
    return false;
  };
  OffloadSteps out;
  if (on_edge.size() == g.nodes().size()) {  // edge-only: one step, the output stays there
    out.edge.push_back({{"recv", tensor_names(g, {image})},
                        {"nodes", node_names(g, edge_nodes)},
                        {"send", tensor_names(g, {output})}});
    return out;
  }
  // Edge steps: the image first when the cloud reads it, then each edge node's uploads right
  // after it (the nodes since the last upload run in that step).
  std::vector<int> pending;
  auto add_edge_step = [&](const std::vector<int>& send) {
    nlohmann::json step{{"recv", nlohmann::json::array()},
                        {"nodes", node_names(g, pending)},
                        {"send", tensor_names(g, send)}};
    if (out.edge.empty()) step["recv"] = tensor_names(g, {image});
    out.edge.push_back(std::move(step));
    out.uploads.insert(out.uploads.end(), send.begin(), send.end());
    pending.clear();
  };
  if (uploaded(image)) add_edge_step({image});
  for (int id : edge_nodes) {
    pending.push_back(id);
    std::vector<int> send;
    for (int t : g.node(id).outputs)
      if (uploaded(t)) send.push_back(t);
    if (!send.empty()) add_edge_step(send);
  }
  if (!pending.empty())  // edge nodes whose results nothing in the cloud reads: wasted, refused
    throw InvalidArgument(cat("offload: edge node '", g.node(pending.back()).name,
                              "' computes nothing the cloud reads"));
  // Cloud steps: step k receives edge step k's uploads and runs every cloud node it can.
  std::set<int> have;
  std::vector<int> cloud_left;
  for (size_t id = 0; id < g.nodes().size(); ++id)
    if (!on_edge.count(static_cast<int>(id))) cloud_left.push_back(static_cast<int>(id));
  for (size_t k = 0; k < out.edge.size(); ++k) {
    std::vector<int> recv;
    for (const auto& name : out.edge[k]["send"]) recv.push_back(g.find_tensor(name));
    have.insert(recv.begin(), recv.end());
    std::vector<int> run, wait;
    for (int id : cloud_left) {
      const auto& ins = g.node(id).inputs;
      if (std::all_of(ins.begin(), ins.end(), [&](int t) { return have.count(t) > 0; })) {
        run.push_back(id);
        for (int t : g.node(id).outputs) have.insert(t);
      } else {
        wait.push_back(id);
      }
    }
    cloud_left = std::move(wait);
    const bool last = k + 1 == out.edge.size();
    out.cloud.push_back({{"recv", tensor_names(g, recv)},
                         {"nodes", node_names(g, run)},
                         {"send", last ? tensor_names(g, {output}) : nlohmann::json::array()}});
  }
  if (!cloud_left.empty())
    throw InvalidArgument(
        cat("offload: cloud node '", g.node(cloud_left.front()).name, "' never gets its inputs"));
  return out;
}

sched::PipelinePlan offload_pipeline_plan(const Graph& g, const std::vector<int>& edge_nodes,
                                          const std::string& model, const std::string& edge_device,
                                          const std::string& cloud_device,
                                          const std::string& system) {
  const OffloadSteps steps = offload_steps(g, edge_nodes);
  sched::PipelinePlan plan;
  plan.system = system;
  plan.predicted.unit = "frames";
  plan.stages.emplace_back(
      edge_device, nlohmann::json{{"kind", "cnn.split"}, {"model", model}, {"steps", steps.edge}});
  if (!steps.cloud.empty())
    plan.stages.emplace_back(
        cloud_device,
        nlohmann::json{{"kind", "cnn.split"}, {"model", model}, {"steps", steps.cloud}});
  plan.extra["offload"] = {{"uploads", tensor_names(g, steps.uploads)},
                           {"steps", steps.edge.size()}};
  return plan;
}

sched::PipelinePlan edge_only_pipeline_plan(const Graph& g, const std::string& model,
                                            const std::string& edge_device, size_t steps) {
  if (steps < 1) throw InvalidArgument("edge_only_pipeline_plan: at least one step");
  std::vector<int> all(g.nodes().size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  nlohmann::json edge = offload_steps(g, all).edge;  // one step: every node, the output sent
  const nlohmann::json output = edge[0]["send"];
  edge[0]["send"] = nlohmann::json::array();
  for (size_t k = 1; k < steps; ++k)
    edge.push_back({{"recv", nlohmann::json::array()},
                    {"nodes", nlohmann::json::array()},
                    {"send", nlohmann::json::array()}});
  edge.back()["send"] = output;
  sched::PipelinePlan plan;
  plan.system = "edge-only";
  plan.predicted.unit = "frames";
  plan.stages.emplace_back(
      edge_device, nlohmann::json{{"kind", "cnn.split"}, {"model", model}, {"steps", edge}});
  plan.extra["offload"] = {{"uploads", nlohmann::json::array()}, {"steps", steps}};
  return plan;
}

sched::PlanReplanFn offload_fallback(const Graph& g, const std::string& model,
                                     const std::string& edge_device) {
  return [&g, model, edge_device](const sched::PipelinePlan& current,
                                  const std::vector<std::string>& failed,
                                  const std::vector<std::string>&) {
    if (std::find(failed.begin(), failed.end(), edge_device) != failed.end())
      throw Infeasible(cat("offload: the edge device '", edge_device,
                           "' is lost; it holds the frames and cannot fall back"));
    const size_t steps = current.stages.at(0).stage.at("steps").size();
    sched::PipelinePlan plan = edge_only_pipeline_plan(g, model, edge_device, steps);
    plan.system = current.system + " -> edge-only";
    return plan;
  };
}

sched::Request offload_request(const sched::PipelinePlan& plan, uint64_t id, const Tensor& image) {
  if (plan.stages.empty() || !plan.stages[0].stage.contains("steps"))
    throw InvalidArgument("offload_request: the plan has no cnn.split stage");
  sched::Request r;
  r.id = id;
  r.micros.resize(plan.stages[0].stage["steps"].size());
  r.micros[0].tensors = {image};
  return r;
}

}  // namespace tandem::cnn::edge
