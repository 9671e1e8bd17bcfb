// SPDX-License-Identifier: Apache-2.0
// The state behind a ConvKernel (internal to src/cnn/conv*.cpp). With oneDNN: the primitives per
// tile shape, the packed weights and the kernel chosen for the whole input. conv.cpp is the
// ConvKernel facade (threads per layer, the fallback without oneDNN); conv_onednn.cpp makes and
// runs the primitives; conv_choice.cpp chooses the kernel a conv runs (Winograd, jit_1x1, the own
// 1x1 kernel, NHWC brgemm) and probes that its row bands are bit-identical to the whole map.
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cnn/conv1x1.h"
#include "cnn/kernels.h"
#include "tandem/core/error.h"

#if defined(TANDEM_HAVE_DNNL)
#include <dnnl.hpp>
#endif

namespace tandem::cnn::kernels {

// Runs with `threads` OpenMP threads on this thread, restoring the previous setting (oneDNN reads
// omp_get_max_threads() when it creates and when it runs a primitive).
class OmpThreads {
 public:
  explicit OmpThreads(int threads) : saved_(omp_get_max_threads()), want_(std::max(threads, 1)) {
    if (want_ != saved_) omp_set_num_threads(want_);
  }
  ~OmpThreads() {
    if (want_ != saved_) omp_set_num_threads(saved_);
  }
  OmpThreads(const OmpThreads&) = delete;
  OmpThreads& operator=(const OmpThreads&) = delete;

 private:
  int saved_, want_;
};

#if defined(TANDEM_HAVE_DNNL)

using Dims = dnnl::memory::dims;
using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// A primitive for one source shape/strides, padding and thread count, with its reorders and
// buffers.
struct Prim {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  dnnl::memory::desc src_user, dst_user;
  dnnl::reorder src_reorder, dst_reorder, dst_in_reorder;  // dst_in: residual into dst_buf
  dnnl::memory src_buf, dst_buf, scratch, src_scratch, dst_scratch, dst_in_scratch;
  dnnl::memory weights;      // packed into pd.weights_desc() (shared between primitives)
  bool dst_blocked = false;  // whole-input primitive: dst_user is the blocked layout
  bool post_silu = false;    // a Winograd conv of a SiLU node: SiLU runs after it (vector_exp.h)
  // Bound on the first execution and reused (only the data handles change per call): the stream,
  // the user memories and the convolution's arguments.
  bool bound = false;
  dnnl::stream stream;
  dnnl::memory src_mem, dst_mem;
  std::unordered_map<int, dnnl::memory> conv_args;
};

// key: N, C, H, W, 4 source strides, 4 edge pads, threads
using PrimKey = std::array<int64_t, 14>;  // + the activation layout (plain or any)

struct ConvKernel::Impl {
  Node node;
  Shape in_full;
  bool direct_dw = false;
  bool onednn = true;
  std::string full_impl_name;
  std::string used_impl;  // the implementation of the primitive made last (profile)
  std::mutex mu;
  std::map<PrimKey, std::unique_ptr<Prim>> prims;
  std::vector<std::pair<dnnl::memory::desc, dnnl::memory>> packed;  // weights per layout
  dnnl::memory::desc weights_user, bias_md;

  dnnl::memory packed_weights(const dnnl::memory::desc& want);

  // The primitive descriptor for a source of `xd` dims/`xs` strides and edge pads `p`. When
  // `match` is set, the implementation with that name is chosen if oneDNN offers it (so tiles use
  // the kernel of the whole-image run and give bit-identical results).
  dnnl::convolution_forward::primitive_desc make_pd(const Dims& xd, const Dims& yd,
                                                    const EdgePads& p, const std::string& match);

  dnnl::convolution_forward::primitive_desc make_pd_alg(const Dims& xd, const Dims& yd,
                                                        const EdgePads& p, const std::string& match,
                                                        bool allow_winograd);

  int layout = -1;             // 1: plain NCHW activations (oneDNN's gemm convolution); 0: blocked
  int block = 16;              // channels per block of the blocked layout
  bool winograd = false;       // Winograd allowed (ConvKernel's rule); cleared when its probe fails
  bool avoid_jit_1x1 = false;  // set when jit_1x1 is not exact on row bands (full_impl)
  // A channel slice of a conv whose source is blocked (ConvKernel::for_channels): the source
  // stays blocked when the slice reads fewer channels than a block (a depthwise slice), so the
  // slice runs the whole conv's kernel.
  bool slice_blocked_src = false;
  // The engine's own AVX-512 1x1 kernel (conv1x1.h) instead of oneDNN: set by full_impl when
  // jit_1x1 is not exact on row bands and the conv fits it.
  bool own_1x1 = false;
  std::unique_ptr<Conv1x1Weights> own_weights;
  const Conv1x1Weights& own_packed() {
    if (!own_weights) own_weights = std::make_unique<Conv1x1Weights>(pack_conv1x1(node));
    return *own_weights;
  }
  bool plain_layout() const { return layout == 1; }

  // TANDEM_CNN_CONV_LAYOUT=plain runs every conv on plain NCHW activations (oneDNN's gemm
  // convolution, no activation reorders); the default is the blocked layout.
  void choose_layout(int) {
    if (layout >= 0) return;
    const char* e = std::getenv("TANDEM_CNN_CONV_LAYOUT");
    layout = e && std::string(e) == "plain" ? 1 : 0;
  }

  // The implementation oneDNN picks for the whole input (computed once). oneDNN's jit_1x1 kernel
  // blocks the input-channel sum by the output height (small maps with many channels), so a row
  // band can round differently from the whole map; for 1x1 convs the choice is probed once per
  // geometry (process-wide) and replaced, when a band differs, by the engine's own 1x1 kernel
  // (conv1x1.h), else oneDNN's NHWC brgemm kernel or its generic blocked jit kernel. A Winograd
  // choice is probed on grid-aligned bands and replaced by the direct kernel when one differs.
  // TANDEM_CNN_OWN_1X1=0 never uses the own kernel, =all uses it for every 1x1 conv it fits.
  const std::string& full_impl(int threads);

  // Whether row bands (full width) of the whole-input result come out bit-identical with the
  // implementation in full_impl_name: with grid 1, rows 1.. of heights 1..16, half and all but
  // one; with a Winograd grid g, bands starting at rows 0, g and 2g of heights g..8g, half and
  // the rest of the map (rounded to the grid, as the region algebra computes them).
  bool bands_exact(int64_t ho, int threads, int grid = 1);

  Prim& get(const Tensor& x, const EdgePads& p, const Tensor& y, int threads);

  // The primitive, its scratchpad, the reorders between the user layouts and the primitive's, and
  // the packed weights.
  void finish(Prim& pr);

  void run(const Tensor& x, const EdgePads& p, Tensor& y, int threads);

  // Whole-input primitive with the source in the executor's layout `src_block` (0: NCHW, else
  // nChw{block}c) and the destination in the conv's own layout when that is the blocked one.
  Prim& get_full(int src_block, int threads);

  int output_grid(int threads);

  int full_dst_block(int src_block, int threads);

  void run_full(const float* src, int src_block, float* dst, int threads);

  void execute(Prim& e, void* x, void* y);
};

#else

struct ConvKernel::Impl {
  Node node;
  Shape in_full;
  bool direct_dw = false;
  bool onednn = false;
  void run(const Tensor&, const EdgePads&, Tensor&, int) {
    throw Unsupported("cnn: built without oneDNN");
  }
  int full_dst_block(int, int) { return 0; }
  int output_grid(int) { return 1; }
  void run_full(const float*, int, float*, int) { throw Unsupported("cnn: built without oneDNN"); }
  std::string used_impl;
  int layout = 1;
  bool plain_layout() const { return true; }
};

#endif

}  // namespace tandem::cnn::kernels
