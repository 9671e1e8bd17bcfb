// SPDX-License-Identifier: Apache-2.0
// Reference 2-D convolution (NCHW input, OIHW weights, cross-correlation as in every DL framework):
// one double accumulation per output element over the input channels of its group and the kernel
// window.
#include <cstdint>

#include "reference.h"

namespace tandem::cpu::ref {

void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
            const ops::Conv2dParams& p) {
  const int64_t n = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3);
  const int64_t co = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  const int64_t oh = y.size(2), ow = y.size(3), cog = co / p.groups;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = y.data<float>();
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < co; ++o) {
      const int64_t g = o / cog;  // group of output channel o: input channels [g*cg, (g+1)*cg)
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          double acc = bp ? bp[o] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            for (int64_t ky = 0; ky < kh; ++ky) {
              const int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
              if (iy < 0 || iy >= h) continue;
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t ix = ox * p.stride_w - p.pad_left + kx * p.dilation_w;
                if (ix < 0 || ix >= wd) continue;
                acc += static_cast<double>(xp[((b * c + g * cg + ci) * h + iy) * wd + ix]) *
                       wp[((o * cg + ci) * kh + ky) * kw + kx];
              }
            }
          }
          yp[((b * co + o) * oh + oy) * ow + ox] = static_cast<float>(acc);
        }
      }
    }
  }
}

}  // namespace tandem::cpu::ref
