// SPDX-License-Identifier: Apache-2.0
// Pieces of a CNN between cut tensors, and the work of a tile of a segment
// (tandem/cnn/edge/chain.h).
#include "tandem/cnn/edge/chain.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::cnn::edge {

double region_bytes(const Shape& s, const Region& r) {
  if (s.rank() != 4) return 4.0 * static_cast<double>(s.numel());
  if (r.empty()) return 0.0;
  return 4.0 * static_cast<double>(s[0] * s[1]) * static_cast<double>(r.rows() * r.cols());
}

namespace {

double node_weight_bytes(const Node& n) {
  double b = 0;
  if (n.weight.defined()) b += static_cast<double>(n.weight.nbytes());
  if (n.bias.defined()) b += static_cast<double>(n.bias.nbytes());
  return b;
}

Piece make_piece(const Graph& g, int in, int out, std::vector<int> nodes) {
  Piece p;
  p.in_tensor = in;
  p.out_tensor = out;
  p.out_shape = g.tensor(out).shape;
  p.out_bytes = region_bytes(p.out_shape, full_region(p.out_shape));
  p.spatial = p.out_shape.rank() == 4;
  for (int id : nodes) {
    p.flops += static_cast<double>(g.flops(id));
    p.weight_bytes += node_weight_bytes(g.node(id));
    p.spatial = p.spatial && is_spatial(g.node(id).op);
  }
  p.dense = nodes.size() == 1 && g.node(nodes[0]).op == OpKind::kGemm;
  p.name = g.node(nodes.front()).name;
  if (nodes.size() > 1) p.name += ".." + g.node(nodes.back()).name;
  p.nodes = std::move(nodes);
  return p;
}

}  // namespace

Chain linearise(const Graph& g) {
  if (g.inputs().size() != 1 || g.outputs().size() != 1)
    throw Unsupported(cat("edge planners need a model with one input and one output; this one has ",
                          g.inputs().size(), " input(s) and ", g.outputs().size(), " output(s)"));
  const std::vector<int> cuts = cut_tensors(g);
  if (cuts.size() < 2 || cuts.front() != g.inputs()[0] || cuts.back() != g.outputs()[0])
    throw Unsupported(cat("edge planners: the cut tensors of the model do not run from its input '",
                          g.tensor(g.inputs()[0]).name, "' to its output '",
                          g.tensor(g.outputs()[0]).name, "'"));
  std::vector<Piece> pieces;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    std::vector<int> nodes = nodes_between(g, cuts[i], cuts[i + 1]);
    if (nodes.empty())
      throw Unsupported(cat("edge planners: no node between cut tensors '", g.tensor(cuts[i]).name,
                            "' and '", g.tensor(cuts[i + 1]).name, "'"));
    pieces.push_back(make_piece(g, cuts[i], cuts[i + 1], std::move(nodes)));
  }
  return Chain(g, std::move(pieces));
}

Chain::Chain(const Graph& g, std::vector<Piece> pieces) : g_(&g), pieces_(std::move(pieces)) {
  for (const Piece& p : pieces_) total_flops_ += p.flops;
  if (!pieces_.empty()) useful_flops_ = tile_work(0, size() - 1, out_region(size() - 1)).flops;
}

std::vector<int> Chain::segment_nodes(int first, int last) const {
  std::vector<int> nodes;
  for (int i = first; i <= last; ++i)
    nodes.insert(nodes.end(), piece(i).nodes.begin(), piece(i).nodes.end());
  return nodes;
}

double Chain::segment_weight_bytes(int first, int last) const {
  double b = 0;
  for (int i = first; i <= last; ++i) b += piece(i).weight_bytes;
  return b;
}

bool Chain::segment_spatial(int first, int last) const {
  for (int i = first; i <= last; ++i)
    if (!piece(i).spatial) return false;
  return true;
}

Region Chain::out_region(int last) const { return full_region(piece(last).out_shape); }

TileWork Chain::tile_work(int first, int last, const Region& out) const {
  const Graph& g = *g_;
  const std::vector<int> nodes = segment_nodes(first, last);
  const std::vector<Region> need = required_regions(g, nodes, {{piece(last).out_tensor, out}});
  TileWork w{.first = first, .last = last, .out = out};
  for (int id : nodes) {
    const Node& n = g.node(id);
    NodeWork nw{.node = id};
    Region r;
    for (int t : n.outputs) r = hull(r, need[static_cast<size_t>(t)]);
    if (r.empty()) continue;
    const Shape& ys = g.tensor(n.outputs[0]).shape;
    const Region full = full_region(ys);
    const double area = static_cast<double>(full.rows() * full.cols());
    const double part = ys.rank() == 4 ? static_cast<double>(r.rows() * r.cols()) / area : 1.0;
    nw.flops = static_cast<double>(g.flops(id)) * part;
    for (int t : n.outputs) nw.out_bytes += region_bytes(g.tensor(t).shape, r);
    for (int t : n.inputs)
      nw.in_bytes += region_bytes(g.tensor(t).shape, need[static_cast<size_t>(t)]);
    w.flops += nw.flops;
    w.act_peak_bytes = std::max(w.act_peak_bytes, nw.in_bytes + nw.out_bytes);
    w.nodes.push_back(nw);
  }
  const int in = piece(first).in_tensor;
  w.in_bytes = region_bytes(g.tensor(in).shape, need[static_cast<size_t>(in)]);
  w.out_bytes = region_bytes(piece(last).out_shape, out);
  return w;
}

TileWork Chain::feature_work(int p, int64_t f0, int64_t f1) const {
  const Piece& pc = piece(p);
  TANDEM_CHECK(pc.dense) << "feature_work on piece " << p << " (" << pc.name << "), not a Gemm";
  const int64_t f = pc.out_shape[pc.out_shape.rank() - 1];
  const double part = static_cast<double>(f1 - f0) / static_cast<double>(f);
  TileWork w{.first = p, .last = p, .c0 = f0, .c1 = f1};
  w.in_bytes = region_bytes(g_->tensor(pc.in_tensor).shape, Region{});
  w.out_bytes = pc.out_bytes * part;
  w.flops = pc.flops * part;
  w.act_peak_bytes = w.in_bytes + w.out_bytes;
  w.nodes.push_back(
      {.node = pc.nodes[0], .flops = w.flops, .in_bytes = w.in_bytes, .out_bytes = w.out_bytes});
  return w;
}

}  // namespace tandem::cnn::edge
