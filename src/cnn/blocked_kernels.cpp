// SPDX-License-Identifier: Apache-2.0
// The engine's kernels on the blocked layout nChwBc (see blocked.h). Every channel lane repeats
// the NCHW kernel's arithmetic in the same order (kernels.cpp), so results are bit-identical;
// the lanes past the channel count stay zero.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cnn/blocked.h"
#include "kernels/cpu_info.h"
#include "kernels/parallel.h"

// GCC 12 warns about the undefined first operand inside the masked max intrinsic.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::cnn::kernels {

namespace {

int team(int threads, int64_t elems) {
  return elems < (int64_t{1} << 15) ? 1 : std::max(threads, 1);
}

// Zeroes the lanes past the channel count in the last block of every image (after an operation
// that maps 0 to something else, such as a sigmoid).
void zero_tail(float* y, const BDims& d) {
  const int64_t used = d.c - (d.blocks() - 1) * d.b;
  if (used == d.b) return;
  const int64_t plane = d.h * d.w;
  for (int64_t n = 0; n < d.n; ++n) {
    float* p = y + ((n * d.blocks() + d.blocks() - 1) * plane) * d.b;
    for (int64_t i = 0; i < plane; ++i) std::fill(p + i * d.b + used, p + (i + 1) * d.b, 0.0f);
  }
}

}  // namespace

void to_blocked(const float* x, const BDims& d, float* y, int threads) {
  const int64_t plane = d.h * d.w, nb = d.blocks();
  cpu::parallel_for_static(d.n * nb, team(threads, d.elems()), [&](int64_t p, int) {
    const int64_t n = p / nb, cb = p % nb;
    float* yo = y + p * plane * d.b;
    const int64_t lanes = std::min<int64_t>(d.b, d.c - cb * d.b);
    for (int64_t l = 0; l < d.b; ++l) {
      if (l >= lanes) {
        for (int64_t i = 0; i < plane; ++i) yo[i * d.b + l] = 0.0f;
        continue;
      }
      const float* xi = x + (n * d.c + cb * d.b + l) * plane;
      for (int64_t i = 0; i < plane; ++i) yo[i * d.b + l] = xi[i];
    }
  });
}

void to_plain(const float* x, const BDims& d, float* y, int threads) {
  const int64_t plane = d.h * d.w, nb = d.blocks();
  cpu::parallel_for_static(d.n * d.c, team(threads, d.elems()), [&](int64_t p, int) {
    const int64_t n = p / d.c, c = p % d.c;
    const float* xi = x + ((n * nb + c / d.b) * plane) * d.b + c % d.b;
    float* yo = y + p * plane;
    for (int64_t i = 0; i < plane; ++i) yo[i] = xi[i * d.b];
  });
}

#if defined(__x86_64__)
// The taps kk in [0, k) of one window axis with lo <= base + kk*d < hi: [*k0, *k1) (a window
// position is monotonic in the tap, so they are contiguous).
static void tap_range(int64_t base, int d, int k, int64_t lo, int64_t hi, int* k0, int* k1) {
  int a = 0, b = k;
  while (a < k && base + static_cast<int64_t>(a) * d < lo) ++a;
  while (b > a && base + static_cast<int64_t>(b - 1) * d >= hi) --b;
  *k0 = a;
  *k1 = b;
}

// Max and average pool on 16-lane blocks with AVX-512, each window walked over its real taps only
// (ranges per row and column): per lane the same operations in the same order as the scalar loop
// below (_mm512_max_ps(s, acc) is std::max(acc, s), NaN and signed zeros
// included; the average adds the taps in order from 0 and divides by the same count), so the
// results are the same bits. This is output row oy of one plane (xp: the plane's input, H x W x
// 16; yr: the row's output), a function of its own because a parallel loop's body (an OpenMP
// outlined function or a lambda) does not inherit the caller's target attribute.
static __attribute__((target("avx512f"))) void pool_b16_row(const Window& w, bool is_max,
                                                            const float* xp, int64_t H, int64_t W,
                                                            float* yr, const BDims& yd,
                                                            int64_t oy) {
  // Real rows, and rows inside the declared padding (count_include_pad's divisor).
  const int64_t by = oy * w.sh - w.pt;
  int ky0, ky1, py0, py1;
  tap_range(by, w.dh, w.kh, 0, H, &ky0, &ky1);
  tap_range(by, w.dh, w.kh, -w.pt, H + w.pb, &py0, &py1);
  for (int64_t ox = 0; ox < yd.w; ++ox) {
    const int64_t bx = ox * w.sw - w.pl;
    int kx0, kx1;
    tap_range(bx, w.dw, w.kw, 0, W, &kx0, &kx1);
    __m512 acc =
        is_max ? _mm512_set1_ps(-std::numeric_limits<float>::infinity()) : _mm512_setzero_ps();
    for (int ky = ky0; ky < ky1; ++ky) {
      const float* row = xp + (by + static_cast<int64_t>(ky) * w.dh) * W * 16;
      for (int kx = kx0; kx < kx1; ++kx) {
        const __m512 v = _mm512_loadu_ps(row + (bx + static_cast<int64_t>(kx) * w.dw) * 16);
        acc = is_max ? _mm512_max_ps(v, acc) : _mm512_add_ps(acc, v);
      }
    }
    if (!is_max) {
      int32_t cnt = (ky1 - ky0) * (kx1 - kx0);
      if (w.count_include_pad) {
        int px0, px1;
        tap_range(bx, w.dw, w.kw, -w.pl, W + w.pr, &px0, &px1);
        cnt = (py1 - py0) * (px1 - px0);
      }
      acc = cnt > 0 ? _mm512_div_ps(acc, _mm512_set1_ps(static_cast<float>(cnt)))
                    : _mm512_setzero_ps();
    }
    _mm512_storeu_ps(yr + ox * 16, acc);
  }
}

static void pool_b16(const Window& w, bool is_max, const float* x, const BDims& xd, float* y,
                     const BDims& yd, int threads) {
  const int64_t H = xd.h, W = xd.w, nb = xd.blocks();
  cpu::parallel_for_static(xd.n * nb * yd.h, team(threads, yd.elems()), [&](int64_t p, int) {
    const int64_t oy = p % yd.h, plane = p / yd.h;
    pool_b16_row(w, is_max, x + plane * H * W * 16, H, W, y + (plane * yd.h + oy) * yd.w * 16, yd,
                 oy);
  });
}

#endif

void pool_blocked(const Node& n, const float* x, const BDims& xd, float* y, const BDims& yd,
                  int threads) {
  const Window& w = n.window;
  const bool is_max = n.op == OpKind::kMaxPool;
#if defined(__x86_64__)
  static const bool avx512 = cpu::cpu_info().avx512f;
  if (xd.b == 16 && avx512) {
    pool_b16(w, is_max, x, xd, y, yd, threads);
    if (is_max) zero_tail(y, yd);
    return;
  }
#endif
  const int64_t B = xd.b, H = xd.h, W = xd.w, nb = xd.blocks();
  const float init = is_max ? -std::numeric_limits<float>::infinity() : 0.0f;
  cpu::parallel_for_static(xd.n * nb * yd.h, team(threads, yd.elems()), [&](int64_t p, int) {
    const int64_t oy = p % yd.h, plane = p / yd.h;
    const float* xp = x + plane * H * W * B;
    float* yr = y + (plane * yd.h + oy) * yd.w * B;
    float acc[16];
    for (int64_t ox = 0; ox < yd.w; ++ox) {
      std::fill(acc, acc + B, init);
      int32_t cnt = 0;
      for (int ky = 0; ky < w.kh; ++ky) {
        const int64_t iy = oy * w.sh - w.pt + static_cast<int64_t>(ky) * w.dh;
        const bool real_row = iy >= 0 && iy < H;
        if (!real_row) {
          if (!is_max && w.count_include_pad && iy >= -w.pt && iy < H + w.pb)
            for (int kx = 0; kx < w.kw; ++kx) {
              const int64_t ix = ox * w.sw - w.pl + static_cast<int64_t>(kx) * w.dw;
              cnt += ix >= -w.pl && ix < W + w.pr;
            }
          continue;
        }
        for (int kx = 0; kx < w.kw; ++kx) {
          const int64_t ix = ox * w.sw - w.pl + static_cast<int64_t>(kx) * w.dw;
          const bool real = ix >= 0 && ix < W;
          if (real) {
            const float* s = xp + (iy * W + ix) * B;
            if (is_max) {
              for (int64_t l = 0; l < B; ++l) acc[l] = std::max(acc[l], s[l]);
            } else {
              for (int64_t l = 0; l < B; ++l) acc[l] += s[l];
            }
          }
          if (!is_max) cnt += w.count_include_pad ? (ix >= -w.pl && ix < W + w.pr) : real;
        }
      }
      float* o = yr + ox * B;
      if (is_max) {
        std::memcpy(o, acc, static_cast<size_t>(B) * sizeof(float));
      } else {
        for (int64_t l = 0; l < B; ++l) o[l] = cnt > 0 ? acc[l] / static_cast<float>(cnt) : 0.0f;
      }
    }
  });
  if (is_max) zero_tail(y, yd);  // the padded lanes' max over zeros is 0, unless all taps padded
}

void global_average_pool_blocked(const float* x, const BDims& d, float* y, int threads) {
  const int64_t B = d.b, plane = d.h * d.w, nb = d.blocks();
  const float inv = 1.0f / static_cast<float>(plane);
  cpu::parallel_for_static(d.n * nb, team(threads, d.elems()), [&](int64_t p, int) {
    const int64_t n = p / nb, cb = p % nb;
    float acc[16];
    std::fill(acc, acc + B, 0.0f);
    const float* xp = x + p * plane * B;
    for (int64_t i = 0; i < plane; ++i)
      for (int64_t l = 0; l < B; ++l) acc[l] += xp[i * B + l];
    for (int64_t l = 0; l < B && cb * B + l < d.c; ++l) y[n * d.c + cb * B + l] = acc[l] * inv;
  });
}

void binary_blocked(const Node& n, const float* a, const float* b, const BDims& d, float* y,
                    int threads) {
  const bool add = n.op == OpKind::kAdd;
  const int64_t B = d.b, plane = d.h * d.w, nb = d.blocks();
  const float* cp = b ? nullptr : n.weight.data<float>();
  const int64_t ce = b ? 0 : n.weight.numel();
  cpu::parallel_for_static(d.n * nb, team(threads, d.elems()), [&](int64_t p, int) {
    const int64_t cb = p % nb;
    const float* ap = a + p * plane * B;
    float* yp = y + p * plane * B;
    if (b) {
      const float* bp = b + p * plane * B;
      for (int64_t i = 0; i < plane * B; ++i) yp[i] = add ? ap[i] + bp[i] : ap[i] * bp[i];
      return;
    }
    float bv[16];
    for (int64_t l = 0; l < B; ++l) {
      const int64_t c = cb * B + l;
      bv[l] = c < d.c ? cp[ce == 1 ? 0 : c] : 0.0f;
    }
    for (int64_t i = 0; i < plane; ++i)
      for (int64_t l = 0; l < B; ++l)
        yp[i * B + l] = add ? ap[i * B + l] + bv[l] : ap[i * B + l] * bv[l];
  });
  if (!b) zero_tail(y, d);
}

void activation_blocked(const Activation& act, const float* x, const BDims& d, float* y,
                        int threads) {
  const int64_t e = d.elems(), chunk = 16384;
  cpu::parallel_for_static((e + chunk - 1) / chunk, team(threads, e), [&](int64_t c, int) {
    const int64_t i = c * chunk;
    const int64_t m = std::min(chunk, e - i);
    const float* xs = x + i;
    float* ys = y + i;
    switch (act.kind) {
      case ActKind::kNone:
        if (xs != ys) std::memcpy(ys, xs, static_cast<size_t>(m) * sizeof(float));
        break;
      case ActKind::kRelu:
        for (int64_t k = 0; k < m; ++k) ys[k] = xs[k] > 0.0f ? xs[k] : 0.0f;
        break;
      case ActKind::kLeakyRelu:
        for (int64_t k = 0; k < m; ++k) ys[k] = xs[k] > 0.0f ? xs[k] : xs[k] * act.alpha;
        break;
      case ActKind::kClip:
        for (int64_t k = 0; k < m; ++k) ys[k] = std::min(std::max(xs[k], act.alpha), act.beta);
        break;
      case ActKind::kSigmoid:
        for (int64_t k = 0; k < m; ++k) ys[k] = 1.0f / (1.0f + std::exp(-xs[k]));
        break;
      case ActKind::kSilu:
        for (int64_t k = 0; k < m; ++k) ys[k] = xs[k] / (1.0f + std::exp(-xs[k]));
        break;
    }
  });
  zero_tail(y, d);
}

void affine_blocked(const Node& n, const float* x, const BDims& d, float* y, int threads) {
  const float* s = n.weight.data<float>();
  const float* sh = n.bias.defined() ? n.bias.data<float>() : nullptr;
  const int64_t B = d.b, plane = d.h * d.w, nb = d.blocks();
  cpu::parallel_for_static(d.n * nb, team(threads, d.elems()), [&](int64_t p, int) {
    const int64_t cb = p % nb;
    float sv[16], hv[16];
    for (int64_t l = 0; l < B; ++l) {
      const int64_t c = cb * B + l;
      sv[l] = c < d.c ? s[c] : 0.0f;
      hv[l] = c < d.c && sh ? sh[c] : 0.0f;
    }
    const float* xp = x + p * plane * B;
    float* yp = y + p * plane * B;
    for (int64_t i = 0; i < plane; ++i)
      for (int64_t l = 0; l < B; ++l) yp[i * B + l] = xp[i * B + l] * sv[l] + hv[l];
  });
}

void resize_blocked(const Node& n, const float* x, const BDims& xd, float* y, const BDims& yd,
                    int threads) {
  const int64_t B = xd.b, nb = xd.blocks();
  cpu::parallel_for_static(xd.n * nb * yd.h, team(threads, yd.elems()), [&](int64_t p, int) {
    const int64_t oy = p % yd.h, plane = p / yd.h;
    const float* xr = x + (plane * xd.h + oy / n.scale_h) * xd.w * B;
    float* yr = y + (plane * yd.h + oy) * yd.w * B;
    for (int64_t ox = 0; ox < yd.w; ++ox)
      std::memcpy(yr + ox * B, xr + (ox / n.scale_w) * B, static_cast<size_t>(B) * sizeof(float));
  });
}

void concat_blocked(const std::vector<const float*>& xs, const std::vector<BDims>& xds, float* y,
                    const BDims& yd, int threads) {
  const int64_t block_elems = yd.h * yd.w * yd.b;
  int64_t b0 = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t nb = xds[i].blocks();
    cpu::parallel_for_static(yd.n * nb, team(threads, xds[i].elems()), [&](int64_t p, int) {
      const int64_t n = p / nb, cb = p % nb;
      std::memcpy(y + (n * yd.blocks() + b0 + cb) * block_elems, xs[i] + p * block_elems,
                  static_cast<size_t>(block_elems) * sizeof(float));
    });
    b0 += nb;
  }
}

void split_blocked(const float* x, const BDims& xd, const std::vector<float*>& ys,
                   const std::vector<BDims>& yds, int threads) {
  const int64_t block_elems = xd.h * xd.w * xd.b;
  int64_t b0 = 0;
  for (size_t i = 0; i < ys.size(); ++i) {
    const int64_t nb = yds[i].blocks();
    cpu::parallel_for_static(xd.n * nb, team(threads, yds[i].elems()), [&](int64_t p, int) {
      const int64_t n = p / nb, cb = p % nb;
      std::memcpy(ys[i] + p * block_elems, x + (n * xd.blocks() + b0 + cb) * block_elems,
                  static_cast<size_t>(block_elems) * sizeof(float));
    });
    b0 += nb;
  }
}

}  // namespace tandem::cnn::kernels
