// SPDX-License-Identifier: Apache-2.0
// The engine's own AVX-512 1x1 convolution on blocked activations (conv1x1.h).
//
// A 1x1 convolution is a GEMM: y[p][o] = sum_c x[p][c] * w[c][o]. The micro-kernel keeps a tile
// of P output pixels x OB output-channel blocks (16 channels each) in P*OB zmm accumulators,
// walks the input channels once in order (one broadcast of x and OB weight-vector loads per
// channel, P*OB FMAs), then adds the bias, the residual already in the destination, applies the
// activation and stores. Every output value is therefore the same sequence of roundings whatever
// the tile, band, thread count or work split: the property oneDNN's jit_1x1 kernel lacks (it
// splits the channel sum into blocks that depend on the map's size and adds the partial sums).
#include "cnn/conv1x1.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <cstring>

#include "cnn/blocked.h"
#include "cnn/vector_exp.h"
#include "kernels/parallel.h"
#include "tandem/core/error.h"

// GCC 12 warns about the undefined first operand inside the masked min/max intrinsics.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace tandem::cnn::kernels {

namespace {

constexpr int kB = 16;       // channels per block (AVX-512 lanes)
constexpr int kTileP = 6;    // output pixels per micro-kernel tile
constexpr int kTileOB = 4;   // output-channel blocks per micro-kernel tile
constexpr int kChunkP = 48;  // output pixels per work item (a multiple of kTileP)

// Index of weight (o, c) in the packed layout: group g = o / (16 * kTileOB) starts at
// g * kTileOB * C16 * 16 and holds [C16][nb][16] with nb = its number of blocks.
int64_t w_index(const Conv1x1Weights& p, int64_t o, int64_t c) {
  const int64_t blk = o / kB, g = blk / kTileOB;
  const int64_t nb = std::min<int64_t>(kTileOB, p.ob - g * kTileOB);
  return g * kTileOB * p.cb * kB * kB + (c * nb + blk % kTileOB) * kB + o % kB;
}

#if defined(__x86_64__)

struct Args {
  const float* w;          // packed weights of the tile's output-block group: [c][OB][16]
  const float* x[kTileP];  // input pixel bases (block 0)
  int64_t x_cb_stride;     // floats between input-channel blocks
  int64_t cb;              // input-channel blocks
  const float* bias;       // padded bias of the tile's first output block
  float* y[kTileP];        // output pixel bases (the tile's first output block)
  int64_t y_ob_stride;     // floats between output blocks
  bool residual;
  const Activation* act;
  __mmask16 last_mask;  // valid lanes of the layer's last output block
  bool has_last;        // the tile holds the layer's last output block
};

__attribute__((target("avx512f,fma"))) inline __m512 activate(__m512 v, const Activation& a) {
  switch (a.kind) {
    case ActKind::kSigmoid:
      return sigmoid16(v);
    case ActKind::kSilu:
      return silu16(v);
    case ActKind::kRelu:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case ActKind::kLeakyRelu: {
      const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
      return _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(a.alpha));
    }
    case ActKind::kClip:
      return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(a.alpha)), _mm512_set1_ps(a.beta));
    default:
      return v;
  }
}

template <int P, int OB>
__attribute__((target("avx512f,fma"))) void micro(const Args& a) {
  __m512 acc[P][OB];
  for (int p = 0; p < P; ++p)
    for (int o = 0; o < OB; ++o) acc[p][o] = _mm512_setzero_ps();
  const float* w = a.w;
  for (int64_t cb = 0; cb < a.cb; ++cb) {
    const int64_t xo = cb * a.x_cb_stride;
    // The tile's input lines two channel blocks ahead: each block of a pixel is a line in another
    // page (a map's size apart), too many streams for the hardware prefetcher on wide layers.
    if (cb + 2 < a.cb)
      for (int p = 0; p < P; ++p)
        _mm_prefetch(reinterpret_cast<const char*>(a.x[p] + xo + 2 * a.x_cb_stride), _MM_HINT_T0);
    for (int i = 0; i < kB; ++i) {
      __m512 wv[OB];
      for (int o = 0; o < OB; ++o) wv[o] = _mm512_loadu_ps(w + o * kB);
      for (int p = 0; p < P; ++p) {
        const __m512 xb = _mm512_set1_ps(a.x[p][xo + i]);
        for (int o = 0; o < OB; ++o) acc[p][o] = _mm512_fmadd_ps(wv[o], xb, acc[p][o]);
      }
      w += OB * kB;
    }
  }
  for (int o = 0; o < OB; ++o) {
    const __m512 b = _mm512_loadu_ps(a.bias + o * kB);
    const bool last = a.has_last && o == OB - 1;
    for (int p = 0; p < P; ++p) {
      float* yp = a.y[p] + o * a.y_ob_stride;
      __m512 v = _mm512_add_ps(acc[p][o], b);
      if (a.residual) v = _mm512_add_ps(v, _mm512_loadu_ps(yp));
      v = activate(v, *a.act);
      if (last) v = _mm512_maskz_mov_ps(a.last_mask, v);  // padded channels stay zero
      _mm512_storeu_ps(yp, v);
    }
  }
}

using MicroFn = void (*)(const Args&);

template <int P>
MicroFn pick_ob(int ob) {
  switch (ob) {
    case 1:
      return micro<P, 1>;
    case 2:
      return micro<P, 2>;
    case 3:
      return micro<P, 3>;
    default:
      return micro<P, 4>;
  }
}

MicroFn pick(int p, int ob) {
  switch (p) {
    case 1:
      return pick_ob<1>(ob);
    case 2:
      return pick_ob<2>(ob);
    case 3:
      return pick_ob<3>(ob);
    case 4:
      return pick_ob<4>(ob);
    case 5:
      return pick_ob<5>(ob);
    default:
      return pick_ob<6>(ob);
  }
}

#endif  // __x86_64__

}  // namespace

bool conv1x1_available() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

bool conv1x1_fits(const Node& n) {
  const Window& w = n.window;
  // Every activation fits: none, ReLU, LeakyReLU, Clip, Sigmoid, SiLU.
  return n.op == OpKind::kConv && n.groups == 1 && w.kh == 1 && w.kw == 1 && w.pt == 0 &&
         w.pl == 0 && w.pb == 0 && w.pr == 0;
}

Conv1x1Weights pack_conv1x1(const Node& n) {
  TANDEM_CHECK(conv1x1_fits(n)) << "pack_conv1x1: node '" << n.name << "' is not a plain 1x1 conv";
  Conv1x1Weights p;
  p.o = n.weight.size(0);
  p.c = n.weight.size(1);
  p.ob = (p.o + kB - 1) / kB;
  p.cb = (p.c + kB - 1) / kB;
  // Groups of kTileOB output blocks (the micro-kernel's width), each [c][blocks in group][16],
  // so one input channel's weight vectors of a tile are contiguous.
  p.w = Tensor::zeros({p.ob * p.cb * kB * kB}, DType::kF32);
  float* pw = p.w.data<float>();
  p.bias.assign(static_cast<size_t>(p.ob * kB), 0.0f);
  const Tensor wc = n.weight.contiguous();
  const float* w = wc.data<float>();
  for (int64_t o = 0; o < p.o; ++o)
    for (int64_t c = 0; c < p.c; ++c) pw[w_index(p, o, c)] = w[o * p.c + c];
  if (n.bias.defined()) {
    const Tensor bc = n.bias.contiguous();
    std::memcpy(p.bias.data(), bc.data<float>(), static_cast<size_t>(p.o) * sizeof(float));
  }
  return p;
}

#if defined(__x86_64__)
void conv1x1_blocked(const Conv1x1Weights& p, const Node& n, const Conv1x1Geometry& g,
                     const float* x, float* y, bool residual, int threads) {
  TANDEM_CHECK(conv1x1_available()) << "conv1x1_blocked: no AVX-512 on this CPU";
  const int64_t npix = g.yh * g.yw;
  const int64_t chunks = (npix + kChunkP - 1) / kChunkP;
  const int64_t groups = (p.ob + kTileOB - 1) / kTileOB;
  const int64_t x_cb_stride = g.xh * g.xw * kB, y_ob_stride = g.yh * g.yw * kB;
  const int64_t x_img = p.cb * x_cb_stride, y_img = p.ob * y_ob_stride;
  const int last_lanes = static_cast<int>(p.o - (p.ob - 1) * kB);
  const __mmask16 last_mask = static_cast<__mmask16>((1u << last_lanes) - 1u);
  // Weights bigger than the input: output-channel groups outer (a group's weights stay in cache
  // while the pixels stream), and a thread takes a whole group at a time (each core then reads
  // only its own groups' weights); else pixel chunks outer.
  const bool groups_outer = p.w.numel() > x_img;
  const int64_t items = g.n * chunks * groups;
  // Dynamic (parallel_for): on a shared machine a pre-empted thread's work goes to the others (a
  // static split waits for it); a unit is a whole group's chunks when groups are outer. Every
  // output is computed by exactly one item, so the split never changes bits.
  const int64_t unit = groups_outer ? chunks : 1;
  auto run_item = [&](int64_t it) {
    const int64_t img = it / (chunks * groups);
    const int64_t r = it % (chunks * groups);
    const int64_t grp = groups_outer ? r / chunks : r % groups;
    const int64_t chunk = groups_outer ? r % chunks : r / groups;
    const int64_t ob0 = grp * kTileOB;
    const int ob = static_cast<int>(std::min<int64_t>(kTileOB, p.ob - ob0));
    Args a;
    a.w = p.w.data<float>() + ob0 * p.cb * kB * kB;
    a.x_cb_stride = x_cb_stride;
    a.cb = p.cb;
    a.bias = p.bias.data() + ob0 * kB;
    a.y_ob_stride = y_ob_stride;
    a.residual = residual;
    a.act = &n.act;
    a.last_mask = last_mask;
    a.has_last = ob0 + ob == p.ob;
    const float* xi = x + img * x_img;
    float* yi = y + img * y_img + ob0 * y_ob_stride;
    const int64_t p_end = std::min(npix, (chunk + 1) * kChunkP);
    for (int64_t p0 = chunk * kChunkP; p0 < p_end; p0 += kTileP) {
      const int tp = static_cast<int>(std::min<int64_t>(kTileP, p_end - p0));
      for (int k = 0; k < tp; ++k) {
        const int64_t oh = (p0 + k) / g.yw, ow = (p0 + k) % g.yw;
        const int64_t ih = oh * g.sh + g.row_off, iw = ow * g.sw + g.col_off;
        a.x[k] = xi + (ih * g.xw + iw) * kB;
        a.y[k] = yi + (oh * g.yw + ow) * kB;
      }
      pick(tp, ob)(a);
    }
  };
  cpu::parallel_for((items + unit - 1) / unit, std::max(threads, 1), [&](int64_t u, int) {
    for (int64_t it = u * unit, end = std::min(items, it + unit); it < end; ++it) run_item(it);
  });
}
#else
void conv1x1_blocked(const Conv1x1Weights&, const Node&, const Conv1x1Geometry&, const float*,
                     float*, bool, int) {
  throw Unsupported("conv1x1_blocked: the own 1x1 kernel needs x86-64 with AVX-512");
}
#endif

void conv1x1_nchw_tile(const Conv1x1Weights& w, const Node& n, const Tensor& x, Tensor& y,
                       int threads) {
  const Tensor xc = x.contiguous();
  const BDims xd{xc.size(0), xc.size(1), xc.size(2), xc.size(3), kB};
  const BDims yd{y.size(0), y.size(1), y.size(2), y.size(3), kB};
  std::vector<float> xb(static_cast<size_t>(xd.elems())), yb(static_cast<size_t>(yd.elems()));
  to_blocked(xc.data<float>(), xd, xb.data(), threads);
  const bool residual = n.inputs.size() == 2;
  if (residual) to_blocked(y.data<float>(), yd, yb.data(), threads);
  const Conv1x1Geometry g{xd.n, xd.h, xd.w, yd.h, yd.w, n.window.sh, n.window.sw, 0, 0};
  conv1x1_blocked(w, n, g, xb.data(), yb.data(), residual, threads);
  to_plain(yb.data(), yd, y.data<float>(), threads);
}

void conv1x1_whole(const Conv1x1Weights& w, const Node& n, const Shape& in_full, const float* src,
                   int src_block, float* dst, int threads) {
  const BDims xd{in_full[0], in_full[1], in_full[2], in_full[3], kB};
  const int64_t ho = (in_full[2] - 1) / n.window.sh + 1, wo = (in_full[3] - 1) / n.window.sw + 1;
  std::vector<float> xb;
  if (!src_block) {
    xb.resize(static_cast<size_t>(xd.elems()));
    to_blocked(src, xd, xb.data(), threads);
    src = xb.data();
  }
  const Conv1x1Geometry g{xd.n, xd.h, xd.w, ho, wo, n.window.sh, n.window.sw, 0, 0};
  conv1x1_blocked(w, n, g, src, dst, n.inputs.size() == 2, threads);
}

}  // namespace tandem::cnn::kernels
