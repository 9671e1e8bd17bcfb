// SPDX-License-Identifier: Apache-2.0
// Region algebra, required regions and cut tensors (see tandem/cnn/region.h).
#include "tandem/cnn/region.h"

#include <algorithm>
#include <functional>

#include "tandem/core/error.h"

namespace tandem::cnn {

std::string Region::to_string() const { return cat("[", h0, ",", h1, ")x[", w0, ",", w1, ")"); }

Region full_region(const Shape& s) {
  if (s.rank() == 4) return {0, s[2], 0, s[3]};
  return {0, 1, 0, 1};
}

Region hull(const Region& a, const Region& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return {std::min(a.h0, b.h0), std::max(a.h1, b.h1), std::min(a.w0, b.w0), std::max(a.w1, b.w1)};
}

Region intersect(const Region& a, const Region& b) {
  Region r{std::max(a.h0, b.h0), std::min(a.h1, b.h1), std::max(a.w0, b.w0), std::min(a.w1, b.w1)};
  if (r.empty()) return {};
  return r;
}

bool is_spatial(OpKind op) {
  switch (op) {
    case OpKind::kGlobalAveragePool:
    case OpKind::kFlatten:
    case OpKind::kReshape:
    case OpKind::kGemm:
    case OpKind::kSoftmax:
      return false;
    default:
      return true;
  }
}

namespace {

// One axis of a window: output [o0, o1) -> input [lo, hi) before clamping.
void window_axis(int64_t o0, int64_t o1, int k, int s, int d, int pad, int64_t* lo, int64_t* hi) {
  *lo = o0 * s - pad;
  *hi = (o1 - 1) * s - pad + static_cast<int64_t>(k - 1) * d + 1;
}

}  // namespace

Region align_to_grid(const Region& r, int grid, const Shape& shape) {
  if (grid <= 1 || r.empty()) return r;
  const Region full = full_region(shape);
  const int64_t g = grid;
  return intersect({r.h0 / g * g, (r.h1 + g - 1) / g * g, r.w0 / g * g, (r.w1 + g - 1) / g * g},
                   full);
}

Region input_region(const Graph& g, int node, int input, const Region& want) {
  const Node& n = g.node(node);
  const Shape& in = g.tensor(n.inputs.at(input)).shape;
  const Region full = full_region(in);
  if (want.empty()) return {};
  const Region out = n.op == OpKind::kConv
                         ? align_to_grid(want, n.window.out_grid, g.tensor(n.outputs[0]).shape)
                         : want;
  if (!is_spatial(n.op) || in.rank() != 4) return full;
  switch (n.op) {
    case OpKind::kConv:
    case OpKind::kMaxPool:
    case OpKind::kAveragePool: {
      if (input == 1) return intersect(out, full);  // a conv's residual: the output's region
      const Window& w = n.window;
      Region r;
      window_axis(out.h0, out.h1, w.kh, w.sh, w.dh, w.pt, &r.h0, &r.h1);
      window_axis(out.w0, out.w1, w.kw, w.sw, w.dw, w.pl, &r.w0, &r.w1);
      return intersect(r, full);
    }
    case OpKind::kResize:
      return intersect({out.h0 / n.scale_h, (out.h1 - 1) / n.scale_h + 1, out.w0 / n.scale_w,
                        (out.w1 - 1) / n.scale_w + 1},
                       full);
    default:
      return intersect(out, full);
  }
}

EdgePads edge_pads(const Window& w, const Shape& in, const Region& out) {
  int64_t lo, hi;
  EdgePads p;
  window_axis(out.h0, out.h1, w.kh, w.sh, w.dh, w.pt, &lo, &hi);
  p.top = static_cast<int>(std::max<int64_t>(0, -lo));
  p.bottom = static_cast<int>(std::max<int64_t>(0, hi - in[2]));
  window_axis(out.w0, out.w1, w.kw, w.sw, w.dw, w.pl, &lo, &hi);
  p.left = static_cast<int>(std::max<int64_t>(0, -lo));
  p.right = static_cast<int>(std::max<int64_t>(0, hi - in[3]));
  return p;
}

std::vector<int> all_nodes(const Graph& g) {
  std::vector<int> v(g.nodes().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int>(i);
  return v;
}

std::vector<Region> required_regions(const Graph& g, const std::vector<int>& nodes,
                                     const std::map<int, Region>& wanted) {
  std::vector<Region> need(g.tensors().size());
  for (const auto& [t, r] : wanted) {
    TANDEM_CHECK(t >= 0 && t < static_cast<int>(need.size())) << "tensor id " << t;
    need[t] = hull(need[t], intersect(r, full_region(g.tensor(t).shape)));
  }
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const Node& n = g.node(*it);
    Region out;
    for (int t : n.outputs) out = hull(out, need[t]);
    if (out.empty()) continue;
    if (!is_spatial(n.op)) {
      for (int t : n.outputs) need[t] = full_region(g.tensor(t).shape);
      out = full_region(g.tensor(n.outputs[0]).shape);
    } else {
      if (n.op == OpKind::kConv)  // a Winograd conv computes whole grid tiles
        out = align_to_grid(out, n.window.out_grid, g.tensor(n.outputs[0]).shape);
      for (int t : n.outputs) need[t] = out;  // one computation produces every output's region
    }
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const int t = n.inputs[i];
      need[t] = hull(need[t], input_region(g, *it, static_cast<int>(i), out));
    }
  }
  return need;
}

std::vector<int> cut_tensors(const Graph& g) {
  // Vertices: 0 = source, 1..T = tensors, T+1..T+N = nodes, T+N+1 = sink; numbered so that a
  // topological order is source, inputs, then each node followed by its outputs, then sink.
  const int nt = static_cast<int>(g.tensors().size()), nn = static_cast<int>(g.nodes().size());
  const int src = 0, sink = nt + nn + 1;
  auto tv = [&](int t) { return 1 + t; };
  auto nv = [&](int n) { return 1 + nt + n; };
  std::vector<std::vector<int>> preds(sink + 1);
  std::vector<int> order;
  order.push_back(src);
  for (int t : g.inputs()) {
    preds[tv(t)].push_back(src);
    order.push_back(tv(t));
  }
  for (int i = 0; i < nn; ++i) {
    const Node& n = g.node(i);
    for (int t : n.inputs) preds[nv(i)].push_back(tv(t));
    order.push_back(nv(i));
    for (int t : n.outputs) {
      preds[tv(t)].push_back(nv(i));
      order.push_back(tv(t));
    }
  }
  for (int t : g.outputs()) preds[sink].push_back(tv(t));
  order.push_back(sink);
  std::vector<int> pos(sink + 1, -1), idom(sink + 1, -1);
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int>(i);
  idom[src] = src;
  auto meet = [&](int a, int b) {
    while (a != b) {
      while (pos[a] > pos[b]) a = idom[a];
      while (pos[b] > pos[a]) b = idom[b];
    }
    return a;
  };
  for (size_t i = 1; i < order.size(); ++i) {
    const int v = order[i];
    int d = -1;
    for (int p : preds[v]) {
      if (idom[p] < 0) continue;  // unreachable predecessor
      d = d < 0 ? p : meet(d, p);
    }
    idom[v] = d;
  }
  std::vector<int> cuts;
  if (idom[sink] < 0) return cuts;
  for (int v = idom[sink]; v != src; v = idom[v])
    if (v >= 1 && v <= nt) cuts.push_back(v - 1);
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}

std::vector<int> nodes_between(const Graph& g, int from, int to) {
  std::vector<char> seen(g.nodes().size(), 0);
  std::vector<int> stack{to};
  std::vector<char> tseen(g.tensors().size(), 0);
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (t == from || tseen[t]) continue;
    tseen[t] = 1;
    const int p = g.tensor(t).producer;
    if (p < 0)
      throw InvalidArgument(cat("nodes_between: '", g.tensor(to).name, "' depends on input '",
                                g.tensor(t).name, "' without passing through '",
                                g.tensor(from).name, "' (not a cut before it)"));
    if (seen[p]) continue;
    seen[p] = 1;
    for (int i : g.node(p).inputs) stack.push_back(i);
  }
  std::vector<int> out;
  for (size_t i = 0; i < seen.size(); ++i)
    if (seen[i]) out.push_back(static_cast<int>(i));
  return out;
}

}  // namespace tandem::cnn
