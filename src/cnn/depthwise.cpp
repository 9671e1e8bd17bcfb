// SPDX-License-Identifier: Apache-2.0
// Direct depthwise convolution on NCHW tiles (one filter per channel): per output row, the taps
// accumulate into a row of accumulators in a fixed (ky, kx) order, skipping taps that fall in the
// zero padding. The order does not depend on the tile, so tiles are bit-identical to the whole
// image, and no layout reorder is needed around the op (oneDNN's depthwise kernels want nChw16c,
// and the reorders in and out cost more than the convolution itself). The row loops are compiled
// for AVX-512 and for the baseline and picked at run time.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cnn/kernels.h"
#include "kernels/cpu_info.h"
#include "kernels/parallel.h"

namespace tandem::cnn::kernels {

namespace {

struct DwArgs {
  const float* x;  // plane base of the tile
  int64_t x_row;   // row stride
  int64_t r0, c0;  // tile origin in full coordinates
  int64_t H, W;    // full input extent
  const float* w;  // kh*kw taps
  float bias;
  const Window* win;
  const Region* out;
  float* y;  // plane base of the output tile
  const Activation* act;
  const int64_t* col_lo;  // per kx: output columns [col_lo, col_hi) whose tap is a real column
  const int64_t* col_hi;
  int64_t blo, bhi;  // columns whose taps are all real
};

constexpr int64_t kBlock = 64;  // output columns kept in registers across all taps

template <int kStride>
__attribute__((always_inline)) inline void dw_plane(const DwArgs& a, float* acc) {
  const Window& w = *a.win;
  const int64_t ow = a.out->cols(), oh = a.out->rows();
  const int64_t sw = kStride > 0 ? kStride : w.sw;
  const int64_t g0 = a.out->w0;
  // Output columns [blo, bhi) read only real columns for every kx: their blocks run from
  // registers; the rest go tap by tap with bounds (same per-output tap order, so same sums).
  const int64_t blo = a.blo, bhi = a.bhi;
  for (int64_t oy = 0; oy < oh; ++oy) {
    const int64_t gy = a.out->h0 + oy;
    int ky0 = 0, ky1 = w.kh;  // taps rows inside the image
    while (ky0 < ky1 && gy * w.sh - w.pt + static_cast<int64_t>(ky0) * w.dh < 0) ++ky0;
    while (ky1 > ky0 && gy * w.sh - w.pt + static_cast<int64_t>(ky1 - 1) * w.dh >= a.H) --ky1;
    float* yr = a.y + oy * ow;
    // Register blocks over the interior columns.
    int64_t i0 = blo;
    for (; i0 + kBlock <= bhi; i0 += kBlock) {
      float r[kBlock];
      for (int64_t i = 0; i < kBlock; ++i) r[i] = a.bias;
      for (int ky = ky0; ky < ky1; ++ky) {
        const int64_t iy = gy * w.sh - w.pt + static_cast<int64_t>(ky) * w.dh;
        const float* xr = a.x + (iy - a.r0) * a.x_row - a.c0;
        for (int kx = 0; kx < w.kw; ++kx) {
          const float wv = a.w[ky * w.kw + kx];
          const float* src = xr + (g0 + i0) * sw + static_cast<int64_t>(kx) * w.dw - w.pl;
#pragma omp simd
          for (int64_t i = 0; i < kBlock; ++i) r[i] += wv * src[i * sw];
        }
      }
      for (int64_t i = 0; i < kBlock; ++i) acc[i0 + i] = r[i];
    }
    // The columns left (borders and the tail), tap by tap with bounds.
    auto slow = [&](int64_t c_lo, int64_t c_hi) {
      if (c_lo >= c_hi) return;
      for (int64_t i = c_lo; i < c_hi; ++i) acc[i] = a.bias;
      for (int ky = ky0; ky < ky1; ++ky) {
        const int64_t iy = gy * w.sh - w.pt + static_cast<int64_t>(ky) * w.dh;
        const float* xr = a.x + (iy - a.r0) * a.x_row - a.c0;
        for (int kx = 0; kx < w.kw; ++kx) {
          const float wv = a.w[ky * w.kw + kx];
          const int64_t off = static_cast<int64_t>(kx) * w.dw - w.pl;
          const int64_t lo = std::max(c_lo, a.col_lo[kx]), hi = std::min(c_hi, a.col_hi[kx]);
          const float* src = xr + off;
          for (int64_t i = lo; i < hi; ++i) acc[i] += wv * src[(g0 + i) * sw];
        }
      }
    };
    slow(0, blo);
    slow(i0, ow);
    const Activation& act = *a.act;
    switch (act.kind) {
      case ActKind::kRelu:
        for (int64_t i = 0; i < ow; ++i) yr[i] = acc[i] > 0.0f ? acc[i] : 0.0f;
        break;
      case ActKind::kClip:
        for (int64_t i = 0; i < ow; ++i) yr[i] = std::min(std::max(acc[i], act.alpha), act.beta);
        break;
      case ActKind::kNone:
        std::memcpy(yr, acc, static_cast<size_t>(ow) * sizeof(float));
        break;
      default:
        for (int64_t i = 0; i < ow; ++i) yr[i] = apply_act(acc[i], act);
        break;
    }
  }
}

__attribute__((target("avx512f,avx2,fma"))) void dw_plane_avx512(const DwArgs& a, float* acc) {
  if (a.win->sw == 1)
    dw_plane<1>(a, acc);
  else
    dw_plane<0>(a, acc);
}

void dw_plane_base(const DwArgs& a, float* acc) {
  if (a.win->sw == 1)
    dw_plane<1>(a, acc);
  else
    dw_plane<0>(a, acc);
}

}  // namespace

bool is_depthwise(const Node& n) {
  return n.op == OpKind::kConv && n.groups > 1 && n.weight.size(1) == 1 &&
         n.weight.size(0) == n.groups;
}

void depthwise_conv(const Node& n, const View& x, const Region& out, Tensor& y, int threads) {
  static const bool avx512 = cpu::cpu_info().avx512f && cpu::cpu_info().fma;
  const int64_t nb = x.t.size(0), ch = x.t.size(1);
  const int64_t taps = static_cast<int64_t>(n.window.kh) * n.window.kw;
  const float* wp = n.weight.data<float>();
  const float* bp = n.bias.defined() ? n.bias.data<float>() : nullptr;
  const float* xb = static_cast<const float*>(x.t.raw_data());
  const int64_t s0 = x.t.stride(0), s1 = x.t.stride(1), s2 = x.t.stride(2);
  float* yp = y.data<float>();
  const int64_t plane_out = out.rows() * out.cols();
  // Column ranges per kx, the same for every plane and row.
  const Window& w = n.window;
  const int64_t ow = out.cols(), g0 = out.w0, W = x.full[3];
  std::vector<int64_t> col_lo(static_cast<size_t>(w.kw)), col_hi(static_cast<size_t>(w.kw));
  int64_t blo = 0, bhi = ow;
  for (int kx = 0; kx < w.kw; ++kx) {
    const int64_t off = static_cast<int64_t>(kx) * w.dw - w.pl;
    int64_t lo = 0, hi = ow;
    while (lo < hi && (g0 + lo) * w.sw + off < 0) ++lo;
    while (hi > lo && (g0 + hi - 1) * w.sw + off >= W) --hi;
    col_lo[kx] = lo;
    col_hi[kx] = hi;
    blo = std::max(blo, lo);
    bhi = std::min(bhi, hi);
  }
  if (bhi < blo) bhi = blo;
  const int team =
      cpu::team_size(nb * ch, y.numel() < (int64_t{1} << 14) ? 1 : std::max(threads, 1));
  std::vector<std::vector<float>> accs(team, std::vector<float>(static_cast<size_t>(out.cols())));
  cpu::parallel_for_static(nb * ch, team, [&](int64_t p, int t) {
    std::vector<float>& acc = accs[t];
    {
      const int64_t b = p / ch, c = p % ch;
      DwArgs a{xb + b * s0 + c * s1,
               s2,
               x.region.h0,
               x.region.w0,
               x.full[2],
               x.full[3],
               wp + c * taps,
               bp ? bp[c] : 0.0f,
               &n.window,
               &out,
               yp + p * plane_out,
               &n.act,
               col_lo.data(),
               col_hi.data(),
               blo,
               bhi};
      if (avx512)
        dw_plane_avx512(a, acc.data());
      else
        dw_plane_base(a, acc.data());
    }
  });
}

}  // namespace tandem::cnn::kernels
