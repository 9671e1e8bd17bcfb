// SPDX-License-Identifier: Apache-2.0
// Fast conv2d: oneDNN's convolution primitive when oneDNN is the GEMM provider (dnnl_adapter.h),
// else im2col + GEMM per image and group: col[(c, ky, kx), (oy, ox)] gathers the input window
// (zeros in the padding), and y_g = W_g [Cout/g, C/g*KH*KW] x col. 1x1 stride-1 unpadded
// convolutions skip im2col.
#include <algorithm>
#include <vector>

#include "fast_ops.h"
#include "gemm_f32.h"
#include "kernels/dnnl_adapter.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"

namespace tandem::cpu::fast {

void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
            const ops::Conv2dParams& p) {
  const int threads = cpu_num_threads();
  if (gemm_provider() == GemmProvider::kOneDnn && onednn::conv2d(x, w, bias, y, p, threads)) return;

  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t co = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oh = y.size(2), ow = y.size(3), g = p.groups, cog = co / g;
  const int64_t kdim = cg * kh * kw, pix = oh * ow;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  const bool direct = kh == 1 && kw == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
                      p.pad_left == 0 && p.pad_bottom == 0 && p.pad_right == 0;
  std::vector<float> col(direct ? 0 : static_cast<size_t>(kdim * pix));
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t gi = 0; gi < g; ++gi) {
      const float* xg = xp + (b * c + gi * cg) * h * wd;
      if (!direct) {
        parallel_for(kdim, parallel_threads(kdim * pix, 8 * kdim * pix, threads),
                     [&](int64_t row, int) {
                       const int64_t ci = row / (kh * kw), ky = (row / kw) % kh, kx = row % kw;
                       float* dst = col.data() + row * pix;
                       for (int64_t oy = 0; oy < oh; ++oy) {
                         const int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
                         for (int64_t ox = 0; ox < ow; ++ox) {
                           const int64_t ix = ox * p.stride_w - p.pad_left + kx * p.dilation_w;
                           dst[oy * ow + ox] = (iy >= 0 && iy < h && ix >= 0 && ix < wd)
                                                   ? xg[(ci * h + iy) * wd + ix]
                                                   : 0.0f;
                         }
                       }
                     });
      }
      float* yg = yp + (b * co + gi * cog) * pix;
      sgemm(false, false, cog, pix, kdim, 1.0f, wp + gi * cog * kdim, kdim,
            direct ? xg : col.data(), pix, 0.0f, yg, pix, threads);
      if (bp) {
        for (int64_t o = 0; o < cog; ++o) {
          const float bv = bp[gi * cog + o];
          for (int64_t i = 0; i < pix; ++i) yg[o * pix + i] += bv;
        }
      }
    }
  }
}

}  // namespace tandem::cpu::fast
