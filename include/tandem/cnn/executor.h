// SPDX-License-Identifier: Apache-2.0
// Runs a cnn::Graph on the CPU, NCHW f32, batch as imported.
//
// How: convolutions go to oneDNN (Debian libdnnl-dev) with the bias and the fused activation as
// post-ops and the weights reordered once into the layout oneDNN picks (blocked, e.g. OIhw16i16o);
// the source is handed over as a strided NCHW view, so a tile of a tensor is never copied before a
// conv. Without oneDNN the core ops::conv2d runs instead. Pools, elementwise ops, concat, split
// and nearest resize are the engine's own OpenMP loops; gemm and softmax use the core ops.
// Memory is planned: every tensor gets a slot of a buffer pool when it is produced and gives it
// back after its last consumer, and elementwise ops write over an input that dies with them.
//
// Every kernel works on tiles: a tile is a tensor holding a Region (region.h) of the full tensor,
// and a kernel computes an output region from input tiles using full-tensor coordinates for the
// padding decisions. The whole-image run is the special case of full regions, so run_region() on
// any sub-graph and output region yields exactly the corresponding rows and columns of run()
// (bit-identical for the engine's own kernels; for oneDNN convolutions as long as oneDNN picks the
// same kernel for the tile's shape, which the tests check on every model).
//
//   cnn::Executor ex(graph, {.threads = 2});
//   std::vector<Tensor> out = ex.run({image});              // image: [1, 3, 224, 224] f32
//
// Thread-safety: one run at a time per Executor (it owns the buffer pool); use one Executor per
// thread for concurrent runs.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/cnn/region.h"
#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::cnn {

struct ExecutorOptions {
  int threads = 1;         // OpenMP threads for every kernel (>= 1)
  bool use_onednn = true;  // false: the core ops::conv2d for convolutions
  bool keep_all = false;   // keep every intermediate tensor (no buffer reuse), see tensors()
  bool profile = false;    // time every node (node_times_ms())
  // run(): keep activations in oneDNN's blocked layout (nChw16c on AVX-512) between the ops that
  // have a blocked kernel, so blocked convolutions need no reorder in or out; bit-identical to
  // the NCHW path (false). Needs use_onednn; TANDEM_CNN_BLOCKED=0 turns it off too.
  bool blocked = true;
  // oneDNN's Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions on maps of at least 28x28
  // outputs (ResNet-50's 56x56 and 28x28 3x3 convs take 0.45-0.63 of the direct kernel's time on
  // one AVX-512 core). A Winograd output depends on its place in the transform's 4x4 tile, so the
  // executor sets such a conv's Window::out_grid on its graph (graph()) and every tile is computed
  // on whole grid tiles: tiles stay bit-identical to the whole-image run. Plan regions for
  // run_region with graph(). TANDEM_CNN_WINOGRAD=0 turns it off too.
  bool winograd = true;
  // Device::cuda(i): the whole graph runs there through the CUDA module's cuDNN/cuBLAS runner
  // (device_runner.h); run() only (no run_region, keep_all or profile), outputs on the CPU.
  Device device = Device::cpu();
};

// A tile: `data` is [N, C, region.rows(), region.cols()] for a rank-4 tensor (the whole tensor
// otherwise) and holds `region` of the full tensor; with `channels` set, only those channels of
// axis 1 (C = channels.size(); for a rank-2 tensor, those features).
struct Tile {
  Tensor data;
  Region region;
  Channels channels{};  // empty: every channel
};

struct MemoryPlan {
  int64_t planned_bytes = 0;  // the pool's slots together
  int64_t naive_bytes = 0;    // every tensor in its own buffer
  int slots = 0;
};

class TANDEM_API Executor {
 public:
  Executor(const Graph& graph, ExecutorOptions opts = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Whole-graph run: one tensor per graph input, in order; returns the graph outputs in order.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  // Runs the sub-graph `nodes` (topological order) to produce `wanted` regions of some of its
  // tensors. `inputs` must hold a tile, covering at least the required region (required_regions),
  // of every tensor the sub-graph reads but does not compute. Returns tiles of the wanted tensors
  // cut exactly to the wanted regions.
  //
  // `channels` restricts a wanted tensor to a channel range (region.h, required_channels): only
  // the nodes and channels that range needs run (a conv on its slice of output channels, a gemm
  // on its slice of features), and the returned tile holds just those channels. A channel slice
  // of a conv or gemm runs on the node's weight rows as a view; a conv's slice is packed once
  // into the layout its kernel wants and cached here (the same range costs no packing the next
  // time), and its kernel is the whole conv's (same implementation, layout and threads), so each
  // output channel is summed in the same order as in the whole run: bit-identical for oneDNN's
  // blocked jit, depthwise and grouped kernels and for gemm; within 1e-5 for a slice inside one
  // group of a grouped conv and for oneDNN's jit_1x1 on wide 1x1 convs, which block the
  // input-channel sum differently for the narrower conv (docs/cnn.md).
  //   auto t = ex.run_region(nodes, {{in, {x, full_region(x.shape())}}},
  //                          {{out, full_region(g.tensor(out).shape)}}, {{out, {16, 48}}});
  std::map<int, Tile> run_region(const std::vector<int>& nodes, const std::map<int, Tile>& inputs,
                                 const std::map<int, Region>& wanted,
                                 const std::map<int, Channels>& channels = {});

  // With keep_all: every tensor of the last run(), by tensor id (undefined for ones not computed).
  const std::vector<Tensor>& tensors() const;
  const MemoryPlan& memory_plan() const;
  // With profile: wall time of every node in the last run, by node id (0 for nodes not run).
  const std::vector<double>& node_times_ms() const;
  // The kernel each node ran with last: for convolutions oneDNN's implementation name
  // (impl_info_str(), e.g. "jit_1x1:avx512_core"; " (nchw)" on plain activations), else the
  // engine's own ("tandem:blocked" on nChwBc activations, "tandem:nchw"); "" for nodes not run.
  std::vector<std::string> node_impls() const;
  // The graph this executor runs: the one given, with Window::out_grid set on its Winograd convs
  // (the region algebra on it gives the regions run_region needs).
  const Graph& graph() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cnn
