// SPDX-License-Identifier: Apache-2.0
// The edge planners' view of a CNN: a chain of pieces, and the work of one device's tile of a
// segment of pieces (spec cnn.md §2, §3.2).
//
// What: linearise() cuts a cnn::Graph at its cut tensors (region.h cut_tensors: the tensors every
// input->output path crosses), one piece per zone, so a residual or inception block is one piece
// with one input map and one output map. Every edge planner (PICO and its baselines; later
// DeepZoning and DECC) plans over these pieces. A segment is a contiguous piece range [first,
// last]; a device computes a tile of the segment's output: a Region (rows, or a 2-D rectangle),
// a range of output channels of the last piece (a fully-connected piece's features; DeepZoning's
// channel mode), or both (hybrid mode).
//
// How: tile_work() back-propagates the tile's output region through the segment with the exact
// region algebra (required_regions), so halos are counted, and returns per node the FLOPs of the
// region it must compute (PICO eq. 2: 2·k_h·k_w·(C_in/groups)·C_out per output pixel, i.e.
// Graph::flops scaled by the region's area; pools, adds and other data movement count 0 as in the
// paper), the bytes the tile reads from the segment input and writes, and the largest activation
// footprint of one node (its input regions plus its output region).
//
// Channels (spec cnn.md §3.3 channel and hybrid modes): with an output-channel range [c0, c1) the
// pieces before the last are computed in full over their needed region, and inside the last piece
// the range is carried backwards through the nodes that map channels one to one (pools,
// activations, add/mul, per-channel affine, resize, the residual operand of a conv, grouped and
// depthwise convs by whole groups, concat by operand); a conv with one group, a gemm or a reshape
// needs every input channel. Each node then does the fraction of its FLOPs and bytes its output
// channels are of the whole; an operand of a concat outside the range is not computed at all. The
// bytes received are the segment input's needed region, narrowed to the needed channels only when
// the segment is that one piece (a depthwise or pool piece receives only its channels).
//
//   cnn::edge::Chain chain = cnn::edge::linearise(graph);        // graph: one input, one output
//   cnn::Region rows{0, 56, 0, 224};
//   cnn::edge::TileWork w = chain.tile_work(0, 3, rows);         // pieces 0..3, rows 0..55
//   double halo_flops = w.flops;                                 // >= the rows' share of FLOPs
//
// Thread-safety: a Chain is immutable after linearise(); it points at the graph, which must
// outlive it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/cnn/region.h"
#include "tandem/export.h"

namespace tandem::cnn::edge {

struct Piece {
  int in_tensor = -1;       // the cut tensor it reads
  int out_tensor = -1;      // the cut tensor it produces
  std::vector<int> nodes;   // node ids, topological order
  std::string name;         // "<first node>..<last node>" (or the node's name)
  double flops = 0;         // whole-map FLOPs (PICO eq. 2, groups divided out)
  double out_bytes = 0;     // f32 bytes of the output map
  double weight_bytes = 0;  // weights and biases of its nodes
  Shape out_shape;
  bool spatial = false;  // the output is a [N, C, H, W] map and every node maps regions spatially
  bool dense = false;    // one Gemm node: its output features can be split (LW's FC split)
};

// What one device computes for one tile of a segment.
struct NodeWork {
  int node = -1;
  double flops = 0;
  double in_bytes = 0;   // the regions of its inputs it reads
  double out_bytes = 0;  // the region of its output it writes
};
struct TileWork {
  int first = -1, last = -1;  // the segment's pieces
  Region out{};               // the output region computed (empty: a dense piece's features)
  int64_t c0 = 0, c1 = 0;     // the last piece's output channels (c1 > c0), else all of them
  double flops = 0;           // Σ nodes (halo included)
  double in_bytes = 0;        // the segment input region the tile needs (received)
  double out_bytes = 0;       // the tile's output (sent back)
  double act_peak_bytes = 0;  // max over nodes of inputs + output regions (working memory)
  std::vector<NodeWork> nodes{};
};

class TANDEM_API Chain {
 public:
  Chain(const Graph& g, std::vector<Piece> pieces);
  const Graph& graph() const { return *g_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  int size() const { return static_cast<int>(pieces_.size()); }
  const Piece& piece(int i) const { return pieces_.at(static_cast<size_t>(i)); }
  double total_flops() const { return total_flops_; }  // Σ pieces (Graph::total_flops)
  // The FLOPs the output needs: the whole model as one tile. Below total_flops() when some rows of
  // a map are never read (a stride or pool that drops the last row); redundancy is measured
  // against it.
  double useful_flops() const { return useful_flops_; }
  // The node ids of pieces first..last, in order.
  std::vector<int> segment_nodes(int first, int last) const;
  double segment_weight_bytes(int first, int last) const;
  // True when the segment's output can be cut into row bands or rectangles: every piece spatial.
  bool segment_spatial(int first, int last) const;
  // The output map of the segment (the last piece's), as a full Region.
  Region out_region(int last) const;
  // The work of computing region `out` of piece `last`'s output from piece `first`'s input.
  TileWork tile_work(int first, int last, const Region& out) const;
  // The same for output channels [c0, c1) of that region only (see above; c1 <= c0: all). For a
  // dense piece `out` is ignored (its output has no rows) and the channels are its features.
  TileWork tile_work(int first, int last, const Region& out, int64_t c0, int64_t c1) const;
  // A dense piece computing output features [f0, f1): the whole input, that share of the FLOPs.
  TileWork feature_work(int piece, int64_t f0, int64_t f1) const;
  // Output channels of piece `last` (features of a dense piece; 1 for a rank-1 output).
  int64_t out_channels(int last) const;

 private:
  const Graph* g_;
  std::vector<Piece> pieces_;
  double total_flops_ = 0;
  double useful_flops_ = 0;
};

// The chain of pieces of `g`. Throws Unsupported naming the model's inputs/outputs when it has
// more than one of either (give a multi-output model its virtual sink first: with_single_output)
// or a piece would be empty.
TANDEM_API Chain linearise(const Graph& g);

// The name of the virtual sink's tensor (with_single_output).
inline constexpr const char* kSinkTensor = "tandem.sink";

// `g` with one output. A model with several outputs (YOLOv5s's three detection heads) gets a
// virtual sink: each output flattened to [N, size] (a Flatten node) and all of them concatenated
// along axis 1 into one tensor named kSinkTensor, in output order; a single-output graph is
// returned unchanged. The sink is data movement only, so outputs and FLOPs are those of `g`. Its
// piece is not spatial (its output has no rows): planners run it, with the nodes after the
// model's last cut tensor, on one device.
TANDEM_API Graph with_single_output(Graph g);

// The graph of an ONNX model as the edge layer plans and runs it: import_onnx, then
// with_single_output. The planners and the cnn.tiles runtime both load models through it, so the
// tensor names in a plan exist on every worker.
TANDEM_API Graph load_edge_graph(const std::string& onnx_path);

// f32 bytes of region `r` of a tensor of shape `s` (rank 4: N·C·rows·cols; else all of it).
TANDEM_API double region_bytes(const Shape& s, const Region& r);

}  // namespace tandem::cnn::edge
