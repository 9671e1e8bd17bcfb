// SPDX-License-Identifier: Apache-2.0
// The "cnn.split" stage kind: one side (edge or cloud) of a CNN split between two devices at any
// set of tensors (spec cnn.md §3.4, §4: DECC, Neurosurgeon, DADS), run by sched::Pipeline and
// `tandem worker` like every other stage.
//
// Config: {"kind": "cnn.split", "model": ONNX path, "threads": T (optional),
//          "steps": [{"recv": [tensor names], "nodes": [node names], "send": [tensor names]},
//          ...]}.
// A request is cut into one micro-packet per step (Packet::micro = the step): micro k's packet
// brings the tensors of steps[k].recv (in order), the stage runs steps[k].nodes on what it has
// received and computed so far for that request, and sends steps[k].send (in order) to the next
// stage. So the edge side of a DECC plan sends each branch's cut tensor as its own micro-packet as
// soon as it is computed, the runtime's link carries it while the edge computes the next branch,
// and the cloud side starts that branch when its packet arrives: the three-machine flow shop of
// §3.4 (edge compute -> FIFO uplink -> cloud compute) on the pipeline's stage and link threads.
// Nodes run through Executor::run_region on whole tensors (Winograd off, as in cnn.tiles, so both
// sides compute every tensor exactly as one device does: bit-identical to the single-device run).
// The config is checked when the stage is built: every tensor a step reads or sends must have
// been received or computed by then, every node must exist (InvalidArgument naming the step and
// the name). A tensor is dropped from a request's state after the last step that reads or sends
// it, and the request's state after its last step (or reset()).
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "cnn/edge/graph_cache.h"
#include "tandem/cnn/executor.h"
#include "tandem/cnn/region.h"
#include "tandem/core/error.h"
#include "tandem/sched/stage.h"

namespace tandem::cnn::edge {
namespace {

struct SplitStep {
  std::vector<int> recv, nodes, send;  // tensor ids, node ids (topological), tensor ids
  std::vector<int> reads;              // tensors the nodes read but do not compute
  std::vector<int> keep;               // tensors the nodes compute that later steps read or send
  std::vector<int> drop;               // tensors no later step needs (freed after this step)
};

std::vector<std::string> split_names(const nlohmann::json& step, const char* key, size_t k) {
  if (!step.contains(key)) return {};
  const auto& v = step[key];
  if (!v.is_array())
    throw InvalidArgument(cat("cnn.split: step ", k, ": '", key, "' must be an array of names"));
  std::vector<std::string> names;
  for (const auto& n : v) {
    if (!n.is_string())
      throw InvalidArgument(cat("cnn.split: step ", k, ": '", key, "' must be an array of names"));
    names.push_back(n.get<std::string>());
  }
  return names;
}

std::vector<SplitStep> parse_split_steps(const Graph& g, const nlohmann::json& c) {
  if (!c.contains("steps") || !c["steps"].is_array() || c["steps"].empty())
    throw InvalidArgument("cnn.split: 'steps' must be a non-empty array");
  std::map<std::string, int> node_ids;
  for (size_t i = 0; i < g.nodes().size(); ++i) node_ids[g.nodes()[i].name] = static_cast<int>(i);
  auto tensor = [&](const std::string& name, size_t k) {
    const int t = g.find_tensor(name);
    if (t < 0) throw InvalidArgument(cat("cnn.split: step ", k, ": no tensor '", name, "'"));
    return t;
  };
  std::vector<SplitStep> steps;
  std::set<int> have;  // tensors received or computed by the steps so far
  for (size_t k = 0; k < c["steps"].size(); ++k) {
    const nlohmann::json& j = c["steps"][k];
    if (!j.is_object()) throw InvalidArgument(cat("cnn.split: step ", k, " must be an object"));
    SplitStep s;
    for (const std::string& n : split_names(j, "recv", k)) s.recv.push_back(tensor(n, k));
    have.insert(s.recv.begin(), s.recv.end());
    for (const std::string& n : split_names(j, "nodes", k)) {
      const auto it = node_ids.find(n);
      if (it == node_ids.end())
        throw InvalidArgument(cat("cnn.split: step ", k, ": no node '", n, "'"));
      s.nodes.push_back(it->second);
    }
    std::sort(s.nodes.begin(), s.nodes.end());  // node ids are in topological order
    std::set<int> made;
    for (int id : s.nodes) {
      for (int t : g.node(id).inputs)
        if (!made.count(t)) {
          if (!have.count(t))
            throw InvalidArgument(cat("cnn.split: step ", k, ": node '", g.node(id).name,
                                      "' reads '", g.tensor(t).name,
                                      "', which no step has received or computed by then"));
          if (std::find(s.reads.begin(), s.reads.end(), t) == s.reads.end()) s.reads.push_back(t);
        }
      for (int t : g.node(id).outputs) made.insert(t);
    }
    have.insert(made.begin(), made.end());
    for (const std::string& n : split_names(j, "send", k)) {
      const int t = tensor(n, k);
      if (!have.count(t))
        throw InvalidArgument(cat("cnn.split: step ", k, " sends '", n,
                                  "', which no step has received or computed by then"));
      s.send.push_back(t);
    }
    steps.push_back(std::move(s));
  }
  // The last step that reads or sends each tensor: what a step computes is kept only when a later
  // step needs it, and anything held is dropped after its last use.
  std::map<int, size_t> last_use;
  for (size_t k = 0; k < steps.size(); ++k) {
    for (int t : steps[k].reads) last_use[t] = k;
    for (int t : steps[k].send) last_use[t] = k;
  }
  std::set<int> held;
  for (size_t k = 0; k < steps.size(); ++k) {
    SplitStep& s = steps[k];
    held.insert(s.recv.begin(), s.recv.end());
    for (int id : s.nodes)
      for (int t : g.node(id).outputs)
        if (last_use.count(t) && (last_use[t] > k || std::count(s.send.begin(), s.send.end(), t))) {
          s.keep.push_back(t);
          held.insert(t);
        }
    for (auto it = held.begin(); it != held.end();)
      if (!last_use.count(*it) || last_use[*it] <= k) {
        s.drop.push_back(*it);
        it = held.erase(it);
      } else {
        ++it;
      }
  }
  return steps;
}

class SplitStage final : public sched::Stage {
 public:
  explicit SplitStage(const nlohmann::json& c)
      : graph_(load_model(c)),
        steps_(parse_split_steps(*graph_, c)),
        exec_(*graph_, {.threads = c.value("threads", 1), .winograd = false}) {}

  std::string kind() const override { return "cnn.split"; }

  sched::Packet process(sched::Packet p) override {
    if (p.micro < 0 || static_cast<size_t>(p.micro) >= steps_.size() ||
        static_cast<size_t>(p.n_micro) != steps_.size())
      throw InvalidArgument(cat("cnn.split: packet ", p.micro, " of ", p.n_micro,
                                " for a stage of ", steps_.size(),
                                " steps (a request needs one packet per step)"));
    const SplitStep& s = steps_[static_cast<size_t>(p.micro)];
    if (p.tensors.size() != s.recv.size())
      throw InvalidArgument(cat("cnn.split: step ", p.micro, " receives ", s.recv.size(),
                                " tensor(s), the packet has ", p.tensors.size()));
    std::map<int, Tensor>& held = state_[p.request_id];
    for (size_t i = 0; i < s.recv.size(); ++i) {
      const Shape& want = graph_->tensor(s.recv[i]).shape;
      if (!(p.tensors[i].shape() == want))
        throw InvalidArgument(
            cat("cnn.split: step ", p.micro, ": '", graph_->tensor(s.recv[i]).name, "' arrived as ",
                p.tensors[i].shape().to_string(), ", expected ", want.to_string()));
      held[s.recv[i]] = p.tensors[i];
    }
    if (!s.nodes.empty()) {
      std::map<int, Tile> inputs;
      for (int t : s.reads) inputs[t] = Tile{held.at(t), full_region(held.at(t).shape())};
      std::map<int, Region> wanted;
      for (int t : s.keep) wanted[t] = full_region(graph_->tensor(t).shape);
      for (auto& [t, tile] : exec_.run_region(s.nodes, inputs, wanted)) held[t] = tile.data;
    }
    p.tensors.clear();
    for (int t : s.send) p.tensors.push_back(held.at(t));
    for (int t : s.drop) held.erase(t);
    if (static_cast<size_t>(p.micro) + 1 == steps_.size()) state_.erase(p.request_id);
    return p;
  }

  void reset(uint64_t request_id) override { state_.erase(request_id); }

 private:
  static std::shared_ptr<const Graph> load_model(const nlohmann::json& c) {
    if (!c.contains("model") || !c["model"].is_string())
      throw InvalidArgument("cnn.split: 'model' must be a string");
    return detail::cached_edge_graph(c["model"].get<std::string>());
  }

  std::shared_ptr<const Graph> graph_;
  std::vector<SplitStep> steps_;
  Executor exec_;
  std::map<uint64_t, std::map<int, Tensor>> state_;  // by request: tensors received or kept
};

const sched::StageKindRegistration kSplit("cnn.split", [](const nlohmann::json& c) {
  return std::make_unique<SplitStage>(c);
});

}  // namespace
}  // namespace tandem::cnn::edge
