// SPDX-License-Identifier: Apache-2.0
// Pieces of a CNN between cut tensors, and the work of a tile of a segment
// (tandem/cnn/edge/chain.h).
#include "tandem/cnn/edge/chain.h"

#include <algorithm>
#include <map>
#include <set>

#include "tandem/cnn/onnx_import.h"
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

namespace {

Node sink_node(std::string name, OpKind op, std::vector<int> inputs, int output) {
  Node n;
  n.name = std::move(name);
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = {output};
  n.axis = 1;
  return n;
}

}  // namespace

Graph with_single_output(Graph g) {
  if (g.outputs().size() <= 1) return g;
  if (g.find_tensor(kSinkTensor) >= 0)
    throw InvalidArgument(cat("edge planners: the model already has a tensor named '", kSinkTensor,
                              "', the virtual sink's name"));
  const std::vector<int> outputs = g.outputs();
  std::vector<int> flat;
  int64_t batch = -1, width = 0;
  for (int out : outputs) {
    const TensorInfo& t = g.tensor(out);
    if (t.shape.rank() < 1 || t.shape.numel() == 0)
      throw Unsupported(cat("edge planners: output '", t.name, "' has shape ", t.shape.to_string(),
                            ", which the virtual sink cannot flatten"));
    if (batch >= 0 && t.shape[0] != batch)
      throw Unsupported(cat("edge planners: the outputs' batch sizes differ ('", t.name,
                            "': ", t.shape[0], ", earlier ones: ", batch, ")"));
    batch = t.shape[0];
    const int64_t size = t.shape.numel() / batch;
    width += size;
    const std::string name = t.name + ".flat";
    const int f = g.add_tensor(name, Shape{batch, size});
    g.add_node(sink_node("tandem.sink.flatten." + t.name, OpKind::kFlatten, {out}, f));
    flat.push_back(f);
  }
  const int sink = g.add_tensor(kSinkTensor, Shape{batch, width});
  g.add_node(sink_node("tandem.sink", OpKind::kConcat, flat, sink));
  g.set_outputs({sink});
  return g;
}

Graph load_edge_graph(const std::string& onnx_path) {
  return with_single_output(import_onnx(onnx_path));
}

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

namespace {

// A half-open channel range; lo == hi: none.
struct ChannelSpan {
  int64_t lo = 0, hi = 0;
  int64_t size() const { return std::max<int64_t>(0, hi - lo); }
};

int64_t channels_of(const Shape& s) { return s.rank() >= 2 ? s[1] : 1; }

ChannelSpan unite(ChannelSpan a, ChannelSpan b) {
  if (a.size() == 0) return b;
  if (b.size() == 0) return a;
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

// The channels of input `k` of node `n` needed for output channels `o` (of its output 0, or per
// output for a split).
ChannelSpan input_channels(const Graph& g, const Node& n, size_t k,
                           const std::vector<ChannelSpan>& o) {
  const Shape& xs = g.tensor(n.inputs[k]).shape;
  const ChannelSpan all{0, channels_of(xs)};
  const Shape& ys = g.tensor(n.outputs[0]).shape;
  switch (n.op) {
    case OpKind::kConv: {
      if (k == 1) return o[0];  // the residual operand, added channel by channel
      if (n.groups == 1) return all;
      const int64_t opg = ys[1] / n.groups, ipg = xs[1] / n.groups;
      return {o[0].lo / opg * ipg, (o[0].hi + opg - 1) / opg * ipg};
    }
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
    case OpKind::kGlobalAveragePool:
    case OpKind::kActivation:
    case OpKind::kAffine:
    case OpKind::kResize:
      return o[0];
    case OpKind::kAdd:
    case OpKind::kMul:
      return channels_of(xs) == channels_of(ys) ? o[0] : all;  // a broadcast operand: all of it
    case OpKind::kConcat: {
      if (n.axis != 1) return o[0];
      int64_t off = 0;
      for (size_t i = 0; i < k; ++i) off += channels_of(g.tensor(n.inputs[i]).shape);
      const ChannelSpan r{std::max(o[0].lo, off) - off, std::min(o[0].hi, off + xs[1]) - off};
      return r.size() > 0 ? r : ChannelSpan{};
    }
    case OpKind::kSplit: {
      ChannelSpan r;
      int64_t off = 0;
      for (size_t i = 0; i < n.outputs.size(); ++i) {
        const int64_t c = channels_of(g.tensor(n.outputs[i]).shape);
        if (o[i].size() > 0)
          r = unite(r, n.axis == 1 ? ChannelSpan{off + o[i].lo, off + o[i].hi} : o[i]);
        if (n.axis == 1) off += c;
      }
      return r;
    }
    default:
      return all;  // gemm, flatten, reshape, softmax: every input channel
  }
}

double fraction(const Shape& s, ChannelSpan c) {
  return static_cast<double>(c.size()) / static_cast<double>(channels_of(s));
}

}  // namespace

int64_t Chain::out_channels(int last) const {
  const Shape& y = piece(last).out_shape;
  return piece(last).dense ? y[y.rank() - 1] : channels_of(y);
}

TileWork Chain::tile_work(int first, int last, const Region& out, int64_t c0, int64_t c1) const {
  if (c1 <= c0) return tile_work(first, last, out);
  const Piece& lp = piece(last);
  if (lp.dense && first == last) return feature_work(last, c0, c1);
  const Graph& g = *g_;
  const Region region = lp.out_shape.rank() == 4 ? out : full_region(lp.out_shape);
  const std::vector<int> nodes = segment_nodes(first, last);
  const std::vector<Region> need = required_regions(g, nodes, {{lp.out_tensor, region}});
  // ChannelSpan needed of each tensor the last piece reads or writes (absent: all of them).
  std::map<int, ChannelSpan> chan{{lp.out_tensor, {c0, c1}}};
  for (auto it = lp.nodes.rbegin(); it != lp.nodes.rend(); ++it) {
    const Node& n = g.node(*it);
    std::vector<ChannelSpan> o;
    for (int t : n.outputs) o.push_back(chan.count(t) ? chan[t] : ChannelSpan{});
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      ChannelSpan& c = chan[n.inputs[k]];
      c = unite(c, input_channels(g, n, k, o));
    }
  }
  const std::set<int> in_last(lp.nodes.begin(), lp.nodes.end());
  auto frac = [&](int t, bool restricted) {
    return restricted ? fraction(g.tensor(t).shape, chan[t]) : 1.0;
  };
  TileWork w{.first = first, .last = last, .out = out, .c0 = c0, .c1 = c1};
  for (int id : nodes) {
    const Node& n = g.node(id);
    const bool restricted = in_last.count(id) > 0;
    Region r;
    for (int t : n.outputs) r = hull(r, need[static_cast<size_t>(t)]);
    if (r.empty()) continue;
    NodeWork nw{.node = id};
    const Shape& ys = g.tensor(n.outputs[0]).shape;
    const Region full = full_region(ys);
    const double area = static_cast<double>(full.rows() * full.cols());
    const double part = ys.rank() == 4 ? static_cast<double>(r.rows() * r.cols()) / area : 1.0;
    double out_c = 0, all_c = 0;
    for (int t : n.outputs) {
      const double f = frac(t, restricted);
      nw.out_bytes += region_bytes(g.tensor(t).shape, r) * f;
      out_c += f * static_cast<double>(channels_of(g.tensor(t).shape));
      all_c += static_cast<double>(channels_of(g.tensor(t).shape));
    }
    if (out_c == 0) continue;  // a branch whose channels nobody needs
    nw.flops = static_cast<double>(g.flops(id)) * part * out_c / all_c;
    for (int t : n.inputs)
      nw.in_bytes +=
          region_bytes(g.tensor(t).shape, need[static_cast<size_t>(t)]) * frac(t, restricted);
    w.flops += nw.flops;
    w.act_peak_bytes = std::max(w.act_peak_bytes, nw.in_bytes + nw.out_bytes);
    w.nodes.push_back(nw);
  }
  const int in = piece(first).in_tensor;
  w.in_bytes =
      region_bytes(g.tensor(in).shape, need[static_cast<size_t>(in)]) * frac(in, first == last);
  w.out_bytes = region_bytes(lp.out_shape, region) * fraction(lp.out_shape, {c0, c1});
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
