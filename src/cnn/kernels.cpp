// SPDX-License-Identifier: Apache-2.0
// The CNN engine's own CPU kernels on tiles (see kernels.h): pools, resize, elementwise, concat,
// split, gemm, softmax. OpenMP over (image, channel) planes.
#include "cnn/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

#if defined(TANDEM_HAVE_DNNL)
#include "fast/dnnl_adapter.h"
#endif

namespace tandem::cnn::kernels {

namespace {

int nthreads(int threads) { return std::max(threads, 1); }

// Pointer to row y (tile-local) of plane (n, c) of a rank-4 view; columns are contiguous.
inline const float* row(const Tensor& t, int64_t n, int64_t c, int64_t y) {
  return static_cast<const float*>(t.raw_data()) + n * t.stride(0) + c * t.stride(1) +
         y * t.stride(2);
}

}  // namespace

View crop(const View& v, const Region& r) {
  if (v.full.rank() != 4) return v;
  TANDEM_CHECK(v.region.contains(r))
      << "tile " << v.region.to_string() << " lacks " << r.to_string();
  View o = v;
  o.t = v.t.slice(2, r.h0 - v.region.h0, r.h1 - v.region.h0)
            .slice(3, r.w0 - v.region.w0, r.w1 - v.region.w0);
  o.region = r;
  return o;
}

float apply_act(float v, const Activation& a) {
  switch (a.kind) {
    case ActKind::kNone:
      return v;
    case ActKind::kRelu:
      return v > 0.0f ? v : 0.0f;
    case ActKind::kLeakyRelu:
      return v > 0.0f ? v : v * a.alpha;
    case ActKind::kClip:
      return std::min(std::max(v, a.alpha), a.beta);
    case ActKind::kSigmoid:
      return 1.0f / (1.0f + std::exp(-v));
    case ActKind::kSilu:
      return v / (1.0f + std::exp(-v));
  }
  return v;
}

void pool(const Node& n, const View& x, const Region& out, Tensor& y, int threads) {
  const Window& w = n.window;
  const int64_t nb = x.t.size(0), ch = x.t.size(1), H = x.full[2], W = x.full[3];
  const int64_t oh = out.rows(), ow = out.cols();
  const bool is_max = n.op == OpKind::kMaxPool;
  float* yp = y.data<float>();
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    const int64_t b = plane / ch, c = plane % ch;
    float* yo = yp + plane * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const int64_t gy = out.h0 + oy;
      for (int64_t ox = 0; ox < ow; ++ox) {
        const int64_t gx = out.w0 + ox;
        float acc = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
        int64_t count = 0;
        for (int ky = 0; ky < w.kh; ++ky) {
          const int64_t iy = gy * w.sh - w.pt + static_cast<int64_t>(ky) * w.dh;
          const bool in_pad_y = iy >= -w.pt && iy < H + w.pb;
          for (int kx = 0; kx < w.kw; ++kx) {
            const int64_t ix = gx * w.sw - w.pl + static_cast<int64_t>(kx) * w.dw;
            if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
              const float v = row(x.t, b, c, iy - x.region.h0)[ix - x.region.w0];
              acc = is_max ? std::max(acc, v) : acc + v;
              ++count;
            } else if (!is_max && w.count_include_pad && in_pad_y && ix >= -w.pl && ix < W + w.pr) {
              ++count;  // zero padding inside the declared pads counts in the divisor
            }
          }
        }
        yo[oy * ow + ox] = is_max ? acc : (count > 0 ? acc / static_cast<float>(count) : 0.0f);
      }
    }
  }
}

void global_average_pool(const View& x, Tensor& y, int threads) {
  const int64_t nb = x.t.size(0), ch = x.t.size(1), h = x.t.size(2), w = x.t.size(3);
  float* yp = y.data<float>();
  const float inv = 1.0f / static_cast<float>(h * w);
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    float acc = 0.0f;
    for (int64_t r = 0; r < h; ++r) {
      const float* p = row(x.t, plane / ch, plane % ch, r);
      for (int64_t c = 0; c < w; ++c) acc += p[c];
    }
    yp[plane] = acc * inv;
  }
}

void resize_nearest(const Node& n, const View& x, const Region& out, Tensor& y, int threads) {
  const int64_t nb = x.t.size(0), ch = x.t.size(1), oh = out.rows(), ow = out.cols();
  float* yp = y.data<float>();
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    float* yo = yp + plane * oh * ow;
    for (int64_t oy = 0; oy < oh; ++oy) {
      const float* src = row(x.t, plane / ch, plane % ch, (out.h0 + oy) / n.scale_h - x.region.h0);
      for (int64_t ox = 0; ox < ow; ++ox)
        yo[oy * ow + ox] = src[(out.w0 + ox) / n.scale_w - x.region.w0];
    }
  }
}

void binary(const Node& n, const View& a, const View* b, Tensor& y, int threads) {
  const bool add = n.op == OpKind::kAdd;
  float* yp = y.data<float>();
  if (a.t.rank() != 4) {  // whole (non-spatial) tensors: contiguous
    const Tensor ac = a.t.contiguous();
    const float* ap = ac.data<float>();
    const int64_t e = ac.numel();
    const Tensor bc = b ? b->t.contiguous() : n.weight;
    const float* bp = bc.data<float>();
    const int64_t be = bc.numel();
    const int64_t inner = ac.rank() >= 2 ? e / (ac.size(0) * ac.size(1)) : 1;
    const int64_t channels = ac.rank() >= 2 ? ac.size(1) : 1;
    for (int64_t i = 0; i < e; ++i) {
      const float bv = be == e ? bp[i] : be == 1 ? bp[0] : bp[(i / inner) % channels];
      yp[i] = add ? ap[i] + bv : ap[i] * bv;
    }
    return;
  }
  const int64_t nb = a.t.size(0), ch = a.t.size(1), h = a.t.size(2), w = a.t.size(3);
  const float* cp = b ? nullptr : n.weight.data<float>();
  const int64_t ce = b ? 0 : n.weight.numel();
  const int64_t H = a.full[2], W = a.full[3];
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    const int64_t bi = plane / ch, c = plane % ch;
    float* yo = yp + plane * h * w;
    for (int64_t r = 0; r < h; ++r) {
      const float* ar = row(a.t, bi, c, r);
      float* yr = yo + r * w;
      if (b) {
        const float* br = row(b->t, bi, c, r);
        for (int64_t k = 0; k < w; ++k) yr[k] = add ? ar[k] + br[k] : ar[k] * br[k];
      } else if (ce == 1 || ce == ch) {
        const float bv = cp[ce == 1 ? 0 : c];
        for (int64_t k = 0; k < w; ++k) yr[k] = add ? ar[k] + bv : ar[k] * bv;
      } else {  // full-shape constant, indexed in full coordinates
        const float* br = cp + ((bi * ch + c) * H + a.region.h0 + r) * W + a.region.w0;
        for (int64_t k = 0; k < w; ++k) yr[k] = add ? ar[k] + br[k] : ar[k] * br[k];
      }
    }
  }
}

void activation(const Activation& act, const View& x, Tensor& y, int threads) {
  float* yp = y.data<float>();
  if (x.t.rank() != 4) {
    const Tensor xc = x.t.contiguous();
    const float* xp = xc.data<float>();
    for (int64_t i = 0; i < xc.numel(); ++i) yp[i] = apply_act(xp[i], act);
    return;
  }
  const int64_t nb = x.t.size(0), ch = x.t.size(1), h = x.t.size(2), w = x.t.size(3);
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    for (int64_t r = 0; r < h; ++r) {
      const float* xr = row(x.t, plane / ch, plane % ch, r);
      float* yr = yp + (plane * h + r) * w;
      for (int64_t k = 0; k < w; ++k) yr[k] = apply_act(xr[k], act);
    }
  }
}

void affine(const Node& n, const View& x, Tensor& y, int threads) {
  const Tensor xc = x.t.rank() == 4 ? x.t : x.t.contiguous();
  const int64_t nb = xc.size(0), ch = xc.size(1);
  const int64_t h = xc.rank() == 4 ? xc.size(2) : 1, w = xc.rank() == 4 ? xc.size(3) : 1;
  const float* s = n.weight.data<float>();
  const float* sh = n.bias.defined() ? n.bias.data<float>() : nullptr;
  float* yp = y.data<float>();
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
  for (int64_t plane = 0; plane < nb * ch; ++plane) {
    const int64_t c = plane % ch;
    for (int64_t r = 0; r < h; ++r) {
      const float* xr = xc.rank() == 4 ? row(xc, plane / ch, c, r) : xc.data<float>() + plane;
      float* yr = yp + (plane * h + r) * w;
      for (int64_t k = 0; k < w; ++k) yr[k] = xr[k] * s[c] + (sh ? sh[c] : 0.0f);
    }
  }
}

void concat(const std::vector<View>& xs, Tensor& y, int threads) {
  float* yp = y.data<float>();
  const int64_t nb = y.size(0), cy = y.size(1);
  const int64_t plane = y.numel() / (nb * cy);
  int64_t c0 = 0;
  for (const View& v : xs) {
    const Tensor& t = v.t;
    const int64_t ch = t.size(1);
    const int64_t h = t.rank() == 4 ? t.size(2) : 1, w = t.rank() == 4 ? t.size(3) : 1;
    const Tensor tc = t.rank() == 4 ? t : t.contiguous();
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
    for (int64_t p = 0; p < nb * ch; ++p) {
      const int64_t b = p / ch, c = p % ch;
      float* dst = yp + (b * cy + c0 + c) * plane;
      for (int64_t r = 0; r < h; ++r) {
        const float* src = tc.rank() == 4 ? row(tc, b, c, r) : tc.data<float>() + b * ch + c;
        std::memcpy(dst + r * w, src, static_cast<size_t>(w) * sizeof(float));
      }
    }
    c0 += ch;
  }
}

void split(const Node& n, const View& x, std::vector<Tensor*>& ys, int threads) {
  const Tensor xc = x.t.rank() == 4 ? x.t : x.t.contiguous();
  const int64_t nb = xc.size(0);
  const int64_t h = xc.rank() == 4 ? xc.size(2) : 1, w = xc.rank() == 4 ? xc.size(3) : 1;
  int64_t c0 = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    const int64_t ch = n.split[i];
    float* yp = ys[i]->data<float>();
#pragma omp parallel for num_threads(nthreads(threads)) schedule(static)
    for (int64_t p = 0; p < nb * ch; ++p) {
      const int64_t b = p / ch, c = p % ch;
      for (int64_t r = 0; r < h; ++r) {
        const float* src =
            xc.rank() == 4 ? row(xc, b, c0 + c, r) : xc.data<float>() + b * xc.size(1) + c0 + c;
        std::memcpy(yp + (p * h + r) * w, src, static_cast<size_t>(w) * sizeof(float));
      }
    }
    c0 += ch;
  }
}

void gemm(const Node& n, const Tensor& x, Tensor& y, int threads) {
  const Tensor xc = x.contiguous();
  const int64_t m = xc.size(0), k = xc.size(1), f = n.weight.size(0);
  bool done = false;
#if defined(TANDEM_HAVE_DNNL)
  if (cpu::onednn::available()) {
    cpu::onednn::sgemm(false, true, m, f, k, 1.0f, xc.data<float>(), k, n.weight.data<float>(), k,
                       0.0f, y.data<float>(), f, nthreads(threads));
    done = true;
  }
#endif
  if (!done) ops::gemm(xc, n.weight, y, {.trans_b = true});
  float* yp = y.data<float>();
  const float* bp = n.bias.defined() ? n.bias.data<float>() : nullptr;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < f; ++j) {
      float v = yp[i * f + j] + (bp ? bp[j] : 0.0f);
      yp[i * f + j] = apply_act(v, n.act);
    }
}

void softmax(const Tensor& x, Tensor& y) {
  const Tensor xc = x.contiguous();
  const int64_t last = xc.size(-1) == 1 && xc.rank() == 4 ? xc.size(1) : xc.size(-1);
  const Tensor x2 = xc.reshape({xc.numel() / last, last});
  Tensor y2 = y.reshape({y.numel() / last, last});
  ops::softmax(x2, y2);
}

void copy_reshape(const Tensor& x, Tensor& y) {
  const Tensor xc = x.contiguous();
  TANDEM_CHECK(xc.numel() == y.numel()) << "reshape element count";
  std::memcpy(y.raw_data(), xc.raw_data(), static_cast<size_t>(xc.nbytes()));
}

}  // namespace tandem::cnn::kernels
