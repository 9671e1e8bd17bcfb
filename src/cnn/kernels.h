// SPDX-License-Identifier: Apache-2.0
// The CNN engine's CPU kernels on tiles (internal). A View is a (possibly strided) rank-4 tensor
// holding `region` of a tensor whose full shape is `full`; kernels compute an output region into a
// contiguous tensor, deciding padding from full-tensor coordinates so that a tile's result equals
// the same rows and columns of the whole-image result.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/cnn/region.h"
#include "tandem/core/tensor.h"

namespace tandem::cnn::kernels {

struct View {
  Tensor t;       // [N, C, region.rows(), region.cols()] (rank 4), or the whole tensor
  Region region;  // what t holds, in full-tensor coordinates
  Shape full;     // the full tensor's shape
  Channels ch{};  // the channels of `full` t holds (C = ch.size()); the executor sets it
};

// `v` restricted to `r` (which it must contain): a strided view, no copy.
View crop(const View& v, const Region& r);
// `v` restricted to channels `c` (which it must hold): a strided view, no copy.
View crop_channels(const View& v, const Channels& c);

float apply_act(float v, const Activation& a);

// Convolution of one node, with per-shape oneDNN primitives and packed weights cached inside.
class ConvKernel {
 public:
  // in_full: the node's whole input shape (tiles reuse the kernel chosen for it).
  // winograd: oneDNN's Winograd F(4x4, 3x3) for a 3x3 stride-1 conv whose output has at least
  // kWinogradMinPixels pixels, where oneDNN has the kernel (output_grid() then says 4).
  ConvKernel(const Node& node, const Shape& in_full, bool use_onednn, bool winograd = false);
  ~ConvKernel();
  // x: the input cropped to input_region(out); residual: the residual input cropped to out, or
  // null (it may share y's memory); y: contiguous [N, O, out.rows(), out.cols()].
  void run(const View& x, const View* residual, const Region& out, Tensor& y, int threads);
  bool uses_onednn() const;
  // The output tile grid of the kernel chosen for the whole input (Window::out_grid): 4 for
  // oneDNN's F(4x4, 3x3) Winograd, 2 for F(2x2, 3x3), else 1. The executor sets it on its graph
  // before planning any region, so tiles are computed on whole transform tiles.
  int output_grid(int threads);
  // The implementation that ran last: oneDNN's impl_info_str() (" (nchw)" when on plain
  // activations), "tandem:direct_dw" or "ops::conv2d".
  std::string impl_name() const;

  // A kernel for the output channels of `sliced`: this node with its weight and bias rows cut to
  // an output-channel range (views; whole groups of a grouped conv), reading `in_sliced` (the
  // input channels those rows read). It packs the sliced weights once, on its first run, and
  // takes this kernel's choices for the whole conv (implementation, layout, threads), so each
  // output channel is summed in the order of the whole conv where oneDNN offers that
  // implementation for the narrower shape.
  std::unique_ptr<ConvKernel> for_channels(const Node& sliced, const Shape& in_sliced, int threads);

  // The whole-input path of the executor's blocked pipeline (oneDNN, not the direct depthwise
  // kernel): src is the whole input in layout `src_block` (0: NCHW, B: nChwBc with B =
  // block_size(), channels padded to a multiple of B); dst is the whole output in the layout
  // full_dst_block() returns, holding the residual first when the node has one.
  bool blocked_capable() const;
  int full_dst_block(int src_block, int threads);
  void run_full(const float* src, int src_block, float* dst, int threads);

  // The threads this layer runs on when `threads` are asked for: 1 below kSerialFlops (waking
  // and joining a second OpenMP thread costs more than it saves on a small layer), else
  // `threads`. A function of the whole layer's shape only, so whole-image runs and tiles of the
  // layer use the same count (and the same oneDNN kernel).
  int layer_threads(int threads) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t flops_ = 0;  // of the whole layer
  int64_t bytes_ = 0;  // its input and output activations
};

// When idle OpenMP threads sleep (OMP_WAIT_POLICY=passive, the setting for shared machines),
// convolutions below this many FLOPs and kSerialBytes of activations (input + output) run on one
// thread (ConvKernel::layer_threads): waking the sleeping thread costs more than it saves on them.
// The bytes keep the memory-bound ones parallel (MobileNetV2's depthwise convs on 112x112 and
// 56x56 maps, 2-8 MFLOP and 1.6-4.8 MB, took 1.4-2.2x ONNX Runtime's 2-thread time on one
// thread). With spinning threads every conv runs on all threads (MobileNetV2, 2 threads: 1.09x
// ONNX Runtime instead of 0.84x). TANDEM_CNN_SERIAL_FLOPS overrides the FLOPs in both cases.
constexpr double kSerialFlops = 20e6;
constexpr int64_t kSerialBytes = 1 << 20;
bool omp_threads_sleep();

// Winograd only where the output map has at least this many pixels (TANDEM_CNN_WINOGRAD_MIN_PIXELS
// overrides): on small maps with many channels the transformed weights (4x the direct ones for
// F(4x4, 3x3): 37.7 MB for a 512->512 conv) stream from memory on every call and the Winograd
// kernel loses (ResNet-50 on one core: 56x56 and 28x28 maps 0.45-0.63 of the direct kernel's
// time, 14x14 0.9, 7x7 1.7).
constexpr int64_t kWinogradMinPixels = 28 * 28;

// Channels per block of the blocked activation layout: 16 with AVX-512, else 8.
int block_size();

// Depthwise convolution (groups == channels == outputs) by direct loops (depthwise.cpp).
bool is_depthwise(const Node& n);
void depthwise_conv(const Node& n, const View& x, const Region& out, Tensor& y, int threads);

void pool(const Node& n, const View& x, const Region& out, Tensor& y, int threads);
void global_average_pool(const View& x, Tensor& y, int threads);
void resize_nearest(const Node& n, const View& x, const Region& out, Tensor& y, int threads);
// y = a op b (b a view of the same region) or a op constant (per-channel, scalar or full).
void binary(const Node& n, const View& a, const View* b, Tensor& y, int threads);
void activation(const Activation& act, const View& x, Tensor& y, int threads);
void affine(const Node& n, const View& x, Tensor& y, int threads);
void concat(const std::vector<View>& xs, Tensor& y, int threads);
void split(const Node& n, const View& x, std::vector<Tensor*>& ys, int threads);
void gemm(const Node& n, const Tensor& x, Tensor& y, int threads);
void softmax(const Tensor& x, Tensor& y);
void copy_reshape(const Tensor& x, Tensor& y);  // flatten / reshape: same elements, new shape

}  // namespace tandem::cnn::kernels
