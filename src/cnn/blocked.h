// SPDX-License-Identifier: Apache-2.0
// The executor's blocked pipeline (internal): whole-image runs keep activations in oneDNN's
// blocked layout nChwBc (B = kernels::block_size(): [N][ceil(C/B)][H][W][B], the channels past C
// zero) from one convolution to the next, so the blocked convolutions pay no reorder in or out.
// Pools, global average pool, add/mul, activations, affine, nearest resize, channel concat and
// split run on the blocks with the engine's own loops, each channel lane doing exactly the
// arithmetic of the NCHW kernel in kernels.cpp (same operations, same order), so the blocked run
// is bit-identical to the NCHW path and to tiles (run_region). Ops without a blocked form (gemm,
// softmax, flatten, reshape, the direct depthwise kernel) get an NCHW copy of their inputs.
#pragma once

#include <memory>
#include <vector>

#include "cnn/kernels.h"
#include "tandem/cnn/executor.h"

namespace tandem::cnn::kernels {

// A rank-4 tensor's dimensions in the blocked layout.
struct BDims {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int b = 16;
  int64_t blocks() const { return (c + b - 1) / b; }
  int64_t elems() const { return n * blocks() * h * w * b; }
};

void to_blocked(const float* x, const BDims& d, float* y, int threads);  // NCHW -> blocked
void to_plain(const float* x, const BDims& d, float* y, int threads);    // blocked -> NCHW
void pool_blocked(const Node& n, const float* x, const BDims& xd, float* y, const BDims& yd,
                  int threads);
// Writes NCHW [N, C, 1, 1].
void global_average_pool_blocked(const float* x, const BDims& d, float* y, int threads);
// y = a op b (b blocked like a, or null for the node's scalar or per-channel constant); y may be a.
void binary_blocked(const Node& n, const float* a, const float* b, const BDims& d, float* y,
                    int threads);
void activation_blocked(const Activation& act, const float* x, const BDims& d, float* y,
                        int threads);
void affine_blocked(const Node& n, const float* x, const BDims& d, float* y, int threads);
void resize_blocked(const Node& n, const float* x, const BDims& xd, float* y, const BDims& yd,
                    int threads);
// Channel concat / split where every part's channel count is a multiple of the block.
void concat_blocked(const std::vector<const float*>& xs, const std::vector<BDims>& xds, float* y,
                    const BDims& yd, int threads);
void split_blocked(const float* x, const BDims& xd, const std::vector<float*>& ys,
                   const std::vector<BDims>& yds, int threads);

// Runs one node of the NCHW path on whole-tensor views (the executor's dispatch).
void dispatch(const Node& n, ConvKernel* conv, const std::vector<View>& in, const Region& out,
              std::vector<Tensor>& ys, int threads);

// Plans a whole-graph run once (layouts, buffers, conversions) and executes it many times.
class BlockedRunner {
 public:
  BlockedRunner(const Graph& g, std::vector<std::unique_ptr<ConvKernel>>& convs, int threads,
                bool keep_all);
  ~BlockedRunner();
  // inputs: NCHW, one per graph input; returns the NCHW graph outputs. With keep_all, `kept`
  // receives every tensor in NCHW; with `times`, each node's wall time.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                          std::vector<double>* times);
  const MemoryPlan& stats() const;
  int blocked_tensors() const;              // how many tensors the plan keeps blocked
  std::vector<char> blocked_nodes() const;  // by node: runs a blocked kernel (convs included)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::cnn::kernels
