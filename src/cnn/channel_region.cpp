// SPDX-License-Identifier: Apache-2.0
// Channel ranges through a graph: which channels of each tensor a channel share needs (see
// tandem/cnn/region.h, "Channel ranges").
#include <algorithm>

#include "tandem/cnn/region.h"
#include "tandem/core/error.h"

namespace tandem::cnn {

std::string Channels::to_string() const { return cat("ch[", c0, ",", c1, ")"); }

Channels full_channels(const Shape& s) {
  if (s.rank() >= 2) return {0, s[1]};
  return {0, 1};
}

Channels hull(const Channels& a, const Channels& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.c0, b.c0), std::max(a.c1, b.c1)};
}

namespace {

// Whether the node can compute a channel subset of its output (else it computes all of it).
bool channelwise(const Graph& g, const Node& n) {
  const Shape& y = g.tensor(n.outputs[0]).shape;
  if (y.rank() < 2) return false;
  switch (n.op) {
    case OpKind::kConv:
    case OpKind::kGemm:
    case OpKind::kActivation:
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
    case OpKind::kGlobalAveragePool:
    case OpKind::kResize:
      return true;
    case OpKind::kAffine:
      return n.weight.numel() == y[1];
    case OpKind::kAdd:
    case OpKind::kMul:
      if (n.inputs.size() == 2)
        return g.tensor(n.inputs[0]).shape[1] == y[1] && g.tensor(n.inputs[1]).shape[1] == y[1];
      return n.weight.numel() == 1 || n.weight.numel() == y[1];
    case OpKind::kConcat:
      return n.axis == 1;
    default:
      return false;
  }
}

}  // namespace

Channels node_channels(const Graph& g, int node, const Channels& want) {
  const Node& n = g.node(node);
  const Channels full = full_channels(g.tensor(n.outputs[0]).shape);
  if (want.empty()) return {};
  if (!channelwise(g, n)) return full;
  if (n.op == OpKind::kConv && n.groups > 1) {  // whole groups
    const int64_t per = full.c1 / n.groups;
    return {want.c0 / per * per, std::min(full.c1, (want.c1 + per - 1) / per * per)};
  }
  return {std::max(want.c0, full.c0), std::min(want.c1, full.c1)};
}

Channels input_channels(const Graph& g, int node, int input, const Channels& out) {
  const Node& n = g.node(node);
  const Channels full = full_channels(g.tensor(n.inputs.at(input)).shape);
  if (out.empty()) return {};
  if (!channelwise(g, n) || out == full_channels(g.tensor(n.outputs[0]).shape)) return full;
  switch (n.op) {
    case OpKind::kConv: {
      if (input == 1) return out;  // the residual
      if (n.groups == 1) return full;
      const int64_t per_out = g.tensor(n.outputs[0]).shape[1] / n.groups;
      const int64_t per_in = full.c1 / n.groups;
      return {out.c0 / per_out * per_in, out.c1 / per_out * per_in};
    }
    case OpKind::kGemm:
      return full;
    case OpKind::kConcat: {
      int64_t off = 0;
      for (int i = 0; i < input; ++i) off += g.tensor(n.inputs[i]).shape[1];
      const Channels r{std::max(out.c0 - off, int64_t{0}), std::min(out.c1 - off, full.c1)};
      return r.empty() ? Channels{} : r;
    }
    default:
      return out;
  }
}

std::vector<Channels> required_channels(const Graph& g, const std::vector<int>& nodes,
                                        const std::map<int, Channels>& wanted) {
  std::vector<Channels> need(g.tensors().size());
  for (const auto& [t, c] : wanted) {
    TANDEM_CHECK(t >= 0 && t < static_cast<int>(need.size())) << "tensor id " << t;
    const Channels full = full_channels(g.tensor(t).shape);
    need[t] = hull(need[t], Channels{std::max(c.c0, full.c0), std::min(c.c1, full.c1)});
  }
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& n = g.node(*it);
    Channels want;
    for (int t : n.outputs) want = hull(want, need[t]);
    if (want.empty()) continue;
    // Every output of a node with several (split) is computed whole; one output gets the range.
    const Channels out = n.outputs.size() == 1 ? node_channels(g, *it, want)
                                               : full_channels(g.tensor(n.outputs[0]).shape);
    for (int t : n.outputs)
      need[t] = n.outputs.size() == 1 ? out : full_channels(g.tensor(t).shape);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int t = n.inputs[i];
      need[t] = hull(need[t], input_channels(g, *it, static_cast<int>(i), out));
    }
  }
  return need;
}

}  // namespace tandem::cnn
