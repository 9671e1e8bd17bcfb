// SPDX-License-Identifier: Apache-2.0
// Fast row-wise and elementwise ops (softmax, RMSNorm, LayerNorm, RoPE, unary, binary, embedding):
// the vector loops of the ISA table, spread over chunks of at least kElementwiseGrain elements, on
// as many threads as parallel_threads() allows for the whole tensor (small tensors stay on the
// calling thread).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../reference/reference.h"
#include "dequant_k.h"
#include "fast_ops.h"
#include "isa.h"
#include "kernels/parallel.h"
#include "tandem/core/backend.h"

namespace tandem::cpu::fast {
namespace {

constexpr int64_t kElementwiseGrain = 1 << 15;  // elements per work item

int64_t last_dim(const Tensor& t) { return t.rank() == 0 ? 1 : t.size(-1); }

// Threads for an elementwise pass over `elems` f32 elements (read and written: 8 bytes each).
int elementwise_threads(int64_t elems) {
  return parallel_threads(elems, 8 * elems, cpu_num_threads());
}

// Calls fn(row0, row1) over chunks of rows of n elements each.
template <class F>
void for_row_chunks(int64_t rows, int64_t n, F&& fn) {
  const int64_t per = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(n, 1));
  const int64_t chunks = (rows + per - 1) / per;
  parallel_for(chunks, elementwise_threads(rows * n),
               [&](int64_t c, int) { fn(c * per, std::min(rows, (c + 1) * per)); });
}

// Calls fn(i0, i1) over chunks of a flat range.
template <class F>
void for_chunks(int64_t total, F&& fn) {
  const int64_t chunks = (total + kElementwiseGrain - 1) / kElementwiseGrain;
  parallel_for(chunks, elementwise_threads(total), [&](int64_t c, int) {
    fn(c * kElementwiseGrain, std::min(total, (c + 1) * kElementwiseGrain));
  });
}

}  // namespace

void softmax(const Tensor& x, const Tensor& y) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const IsaKernels& k = isa();
  for_row_chunks(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.softmax_row(xp + r * n, yp + r * n, n);
  });
}

void rms_norm(const Tensor& x, const Tensor& w, const Tensor& y, const ops::NormParams& p) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  float* yp = y.data<float>();
  const IsaKernels& k = isa();
  for_row_chunks(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.rms_norm_row(xp + r * n, wp, yp + r * n, n, p.eps);
  });
}

void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y,
                const ops::NormParams& p) {
  const int64_t n = last_dim(x), rows = n ? x.numel() / n : 0;
  const float *xp = x.data<float>(), *wp = w.data<float>();
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  float* yp = y.data<float>();
  const IsaKernels& k = isa();
  for_row_chunks(rows, n, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.layer_norm_row(xp + r * n, wp, bp, yp + r * n, n, p.eps);
  });
}

void rope(const Tensor& x, const Tensor& pos, const Tensor& y, const ops::RopeParams& p) {
  const int64_t t = x.size(0), h = x.size(1), d = x.size(2);
  const int64_t rd = p.rotary_dim < 0 ? d : p.rotary_dim, half = rd / 2;
  const float* xp = x.data<float>();
  const int32_t* pp = pos.data<int32_t>();
  float* yp = y.data<float>();
  // Pair frequencies theta^(-2i/rd) and angles in double (positions reach thousands of radians).
  std::vector<double> freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    freq[i] = std::pow(static_cast<double>(p.theta), -2.0 * i / static_cast<double>(rd));
  const IsaKernels& k = isa();
  const int64_t per = std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(h * d, 1));
  const int64_t chunks = (t + per - 1) / per;
  const int threads = elementwise_threads(t * h * d);
  std::vector<std::vector<float>> tables(team_size(chunks, threads));
  parallel_for(chunks, threads, [&](int64_t c, int th) {
    std::vector<float>& tab = tables[th];
    tab.resize(static_cast<size_t>(2 * rd));
    float *cs = tab.data(), *sn = tab.data() + rd;
    for (int64_t i = c * per; i < std::min(t, (c + 1) * per); ++i) {
      for (int64_t f = 0; f < half; ++f) {
        const double ang = static_cast<double>(pp[i]) * freq[f];
        const float cv = static_cast<float>(std::cos(ang)), sv = static_cast<float>(std::sin(ang));
        if (p.neox) {
          cs[f] = cv, sn[f] = sv;
        } else {
          cs[2 * f] = cs[2 * f + 1] = cv;
          sn[2 * f] = -sv, sn[2 * f + 1] = sv;
        }
      }
      for (int64_t hh = 0; hh < h; ++hh)
        k.rope_head(xp + (i * h + hh) * d, yp + (i * h + hh) * d, cs, sn, rd, d, p.neox);
    }
  });
}

void unary(ops::UnaryOp op, const Tensor& x, const Tensor& y) {
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const IsaKernels& k = isa();
  for_chunks(x.numel(), [&](int64_t i0, int64_t i1) { k.unary(op, xp + i0, yp + i0, i1 - i0); });
}

void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& y) {
  const int64_t total = a.numel(), inner = b.numel();
  if (total == 0) return;
  const float *ap = a.data<float>(), *bp = b.data<float>();
  float* yp = y.data<float>();
  const IsaKernels& k = isa();
  if (inner == 1) {
    const float bv = bp[0];
    for_chunks(total,
               [&](int64_t i0, int64_t i1) { k.binary_scalar(op, ap + i0, bv, yp + i0, i1 - i0); });
    return;
  }
  // b repeats along a's leading dimensions: rows of `inner` elements.
  for_row_chunks(total / inner, inner, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) k.binary(op, ap + r * inner, bp, yp + r * inner, inner);
  });
}

void embedding(const Tensor& table, const Tensor& ids, const Tensor& out) {
  const int64_t d = table.size(1), t = ids.numel();
  ref::check_ids(ids, table.size(0), "embedding");
  const int32_t* id = ids.data<int32_t>();
  const auto* base = static_cast<const uint8_t*>(table.raw_data());
  const int64_t rb = dtype_row_bytes(table.dtype(), d);
  float* o = out.data<float>();
  const IsaKernels& k = isa();
  for_row_chunks(t, d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (dtype_is_k_quant(table.dtype())) {
        dequantize_row_k(table.dtype(), base + id[r] * rb, o + r * d, d);
      } else {
        k.dequantize_row(table.dtype(), base + id[r] * rb, o + r * d, d);
      }
    }
  });
}

}  // namespace tandem::cpu::fast
