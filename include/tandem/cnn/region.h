// SPDX-License-Identifier: Apache-2.0
// Region (receptive-field) algebra over a cnn::Graph: which part of each tensor a computation
// needs. This is the substrate of spatial partitioning (PICO, DeepZoning, DECC; spec cnn.md §2).
//
// A Region is a half-open rectangle [h0, h1) x [w0, w1) of a tensor's spatial plane (all batch
// items and channels). For an output region of a node, input_region() gives the exact input
// region it reads, per axis:
//   conv / pool (kernel k, stride s, dilation d, leading pad p):
//     lo = o_lo*s - p,  hi = (o_hi-1)*s - p + (k-1)*d + 1,  clamped to [0, H_in)
//   a conv with Window::out_grid g > 1 (Winograd) first rounds the output region out to multiples
//   of g (clamped to the output), the region its kernel computes;
//   add, mul, concat, split, activations: the same region;  nearest resize by u: [lo/u, (hi-1)/u+1)
//   gemm, flatten, reshape, softmax, global pool: the whole input (they are not spatial).
// A window that hangs over the border reads the op's zero padding there; a window over an
// interior cut reads real halo rows, so a tile computed from its input region is exactly the
// full result's rows (the executor's run_region relies on that).
//
// required_regions() walks a sub-graph backwards and takes, for every tensor, the hull of what
// its consumers need. cut_tensors() finds the tensors every input->output path crosses (the chain
// of dominators of the sink), which split the graph into zones.
//
//   cnn::Region want{10, 20, 0, 56};                               // rows 10..19 of the output
//   auto need = cnn::required_regions(g, cnn::all_nodes(g), {{out, want}});
//   cnn::Region in = need[g.inputs()[0]];                        // the input rows to ship
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/export.h"

namespace tandem::cnn {

struct Region {
  int64_t h0 = 0, h1 = 0, w0 = 0, w1 = 0;  // half-open
  bool empty() const { return h1 <= h0 || w1 <= w0; }
  int64_t rows() const { return h1 - h0; }
  int64_t cols() const { return w1 - w0; }
  bool contains(const Region& r) const {
    return r.h0 >= h0 && r.h1 <= h1 && r.w0 >= w0 && r.w1 <= w1;
  }
  friend bool operator==(const Region& a, const Region& b) {
    return a.h0 == b.h0 && a.h1 == b.h1 && a.w0 == b.w0 && a.w1 == b.w1;
  }
  TANDEM_API std::string to_string() const;  // "[h0,h1)x[w0,w1)"
};

// The spatial extent of a tensor shape: [0,H)x[0,W) for rank 4, [0,1)x[0,1) otherwise.
TANDEM_API Region full_region(const Shape& s);
TANDEM_API Region hull(const Region& a, const Region& b);  // an empty operand is ignored
TANDEM_API Region intersect(const Region& a, const Region& b);

// True when the op maps regions spatially (false: it needs its whole input).
TANDEM_API bool is_spatial(OpKind op);

// The region of input `input` that node `node` reads to produce `out` of its outputs.
TANDEM_API Region input_region(const Graph& g, int node, int input, const Region& out);

// `r` rounded out to multiples of `grid` from the origin, clamped to the spatial extent of
// `shape` (grid <= 1: r unchanged). The region a conv with Window::out_grid computes for r.
TANDEM_API Region align_to_grid(const Region& r, int grid, const Shape& shape);

// The zero padding a conv/pool applies on each side when computing `out` from the clamped input
// region: (top, left, bottom, right). Interior edges get 0; border edges get the real padding.
struct EdgePads {
  int top = 0, left = 0, bottom = 0, right = 0;
};
TANDEM_API EdgePads edge_pads(const Window& w, const Shape& in, const Region& out);

// All node ids in order (a convenience for whole-graph calls).
TANDEM_API std::vector<int> all_nodes(const Graph& g);

// For the sub-graph `nodes` (ids in topological order) and the regions wanted of some tensors
// (usually the sub-graph's outputs), the region of every tensor the sub-graph must compute or
// receive: the hull over its consumers inside the sub-graph and the wanted region. Tensors not
// involved get an empty region. Non-spatial nodes need their whole input and produce their whole
// output.
TANDEM_API std::vector<Region> required_regions(const Graph& g, const std::vector<int>& nodes,
                                                const std::map<int, Region>& wanted);

// Channel ranges, the second axis of partitioning (DeepZoning's channel and hybrid modes, LW's
// split of a fully connected layer; spec cnn.md §3.3): [c0, c1) of a tensor's axis 1 (the channels
// of an NCHW map, the features of a rank-2 tensor). required_channels() walks a sub-graph backwards
// like required_regions(); per node, output channels [c0, c1) read:
//   conv: every input channel (groups == 1), or the input channels of the groups that own
//     [c0, c1) (grouped, depthwise); a grouped conv computes whole groups, so its computed range
//     is [c0, c1) rounded out to whole groups; its residual: [c0, c1);
//   gemm: every input feature (the output features are [c0, c1));
//   activations, affine, pools, global pool, nearest resize, add and mul (of same-channel
//     operands, or with a scalar or per-channel constant): the same channels;
//   concat on axis 1: each input its part of [c0, c1) (possibly none);
//   split, flatten, reshape, softmax, and anything else: the whole input, and they compute their
//     whole output.
//
//   auto ch = cnn::required_channels(g, nodes, {{out, {0, 64}}});   // channels 0..63 of `out`
struct Channels {
  int64_t c0 = 0, c1 = 0;  // half-open
  bool empty() const { return c1 <= c0; }
  int64_t size() const { return c1 - c0; }
  bool contains(const Channels& c) const { return c.c0 >= c0 && c.c1 <= c1; }
  friend bool operator==(const Channels& a, const Channels& b) {
    return a.c0 == b.c0 && a.c1 == b.c1;
  }
  TANDEM_API std::string to_string() const;  // "ch[c0,c1)"
};

// [0, shape[1]) for rank >= 2, [0, 1) otherwise.
TANDEM_API Channels full_channels(const Shape& s);
TANDEM_API Channels hull(const Channels& a, const Channels& b);  // an empty operand is ignored

// The channels node `node` computes when [want] of its outputs are asked for (see above).
TANDEM_API Channels node_channels(const Graph& g, int node, const Channels& want);
// The channels of input `input` that node `node` reads to compute `out` (a node_channels result);
// empty when it reads none of it (a concat input outside the range).
TANDEM_API Channels input_channels(const Graph& g, int node, int input, const Channels& out);

// For the sub-graph `nodes` (topological order) and the channels wanted of some tensors, the
// channels every tensor must be computed over or received with (the hull over its consumers and
// the wanted range); empty for tensors the wanted ones do not need (their producers need not run).
TANDEM_API std::vector<Channels> required_channels(const Graph& g, const std::vector<int>& nodes,
                                                   const std::map<int, Channels>& wanted);

// Tensors that every path from the graph inputs to the graph outputs passes through, in
// topological order (graph inputs first when there is a single one; the last cut is the single
// output's when there is one). Computed with immediate dominators on the tensor DAG with a virtual
// source and sink.
TANDEM_API std::vector<int> cut_tensors(const Graph& g);

// The nodes that compute `to` from `from` (a cut before it): every node `to` depends on that is
// not upstream of `from` (nor its producer), in order.
TANDEM_API std::vector<int> nodes_between(const Graph& g, int from, int to);

}  // namespace tandem::cnn
