// SPDX-License-Identifier: Apache-2.0
// The engine's own 1x1 convolution on blocked activations (internal; AVX-512).
//
// Why: oneDNN 2.6's jit_1x1 kernel splits the input-channel sum into blocks whose size depends
// on the map's size and adds the partial sums, so a row band of a small map with many channels
// rounds differently from the whole map; the executor then had to fall back to slower kernels
// (the generic blocked jit or the NHWC brgemm kernel with reorders) for about half of
// ResNet-50's 1x1 convolutions. This kernel sums every output's input channels in one fixed
// order in registers, so any band, tile, thread count or work split gives the same bits.
//
// How: y[p][o] = act(sum_c x[p][c] * w[c][o] + bias[o] + residual[p][o]) over nChw16c
// activations, with the weights packed once in groups of 4 output blocks as [C16][4][16] (C16: C
// rounded up to 16, zeros past C and O); stride s reads input pixel (oh*s + row_off, ow*s +
// col_off) of the given (possibly cropped) input block. Activations: none, ReLU, LeakyReLU, Clip,
// Sigmoid and SiLU (with a vector e^x of its own, < 2 ulp).
//
//   Conv1x1Weights w = pack_conv1x1(node);
//   conv1x1_blocked(w, node, {.n = 1, .xh = 14, .xw = 14, .yh = 7, .yw = 7, .sh = 2, .sw = 2},
//                   x, y, /*residual=*/false, threads);
#pragma once

#include <cstdint>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/core/tensor.h"

namespace tandem::cnn::kernels {

struct Conv1x1Weights {
  int64_t c = 0, o = 0, cb = 0, ob = 0;  // channels and 16-channel blocks
  // per group of 4 output blocks: [cb*16][blocks][16]; a Tensor, so 64-byte aligned (each weight
  // vector one cache line: straddling two had made the kernel 1.2x slower) and counted by the
  // allocator
  Tensor w;
  std::vector<float> bias;  // [ob*16], zeros past o
};

// Where the output tile's pixels read: output (i, j) of a yh x yw tile reads input pixel
// (i*sh + row_off, j*sw + col_off) of an xh x xw blocked input tile.
struct Conv1x1Geometry {
  int64_t n = 1, xh = 0, xw = 0, yh = 0, yw = 0;
  int sh = 1, sw = 1;
  int64_t row_off = 0, col_off = 0;
};

bool conv1x1_available();          // AVX-512F and FMA on this CPU
bool conv1x1_fits(const Node& n);  // 1x1, one group, no padding
Conv1x1Weights pack_conv1x1(const Node& n);

// x: [n][cb][xh][xw][16]; y: [n][ob][yh][yw][16], holding the residual first when `residual`.
void conv1x1_blocked(const Conv1x1Weights& w, const Node& n, const Conv1x1Geometry& g,
                     const float* x, float* y, bool residual, int threads);

// A tile on NCHW tensors: x is the input cropped to the output's rows and columns times the
// stride, y the output tile (holding the residual first when the node has one); both go to the
// blocked layout and back.
void conv1x1_nchw_tile(const Conv1x1Weights& w, const Node& n, const Tensor& x, Tensor& y,
                       int threads);
// The whole input of shape in_full (layout src_block: 0 NCHW, 16 blocked) into the blocked dst
// (holding the residual first when the node has one).
void conv1x1_whole(const Conv1x1Weights& w, const Node& n, const Shape& in_full, const float* src,
                   int src_block, float* dst, int threads);

}  // namespace tandem::cnn::kernels
