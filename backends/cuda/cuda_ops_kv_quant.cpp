// SPDX-License-Identifier: Apache-2.0
// quantized_paged_attention on CUDA: the page table of a quantized KV cache (device pointers and
// byte sizes of the packed codes, formats, slot positions), the query positions and the per-head
// channel scales are packed into one host buffer and copied to the device in one transfer, then
// kernels/kv_quant_attention.cu runs. The caller (llm::cache_attention) validated the pages.
#include <algorithm>
#include <vector>

#include "cuda_ops.h"
#include "tandem/core/error.h"

namespace tandem::cuda {
namespace {

int64_t align8(int64_t n) { return (n + 7) / 8 * 8; }

k::QuantKvSide side_of(const Tensor& t, const ops::KvCodes& c) {
  k::QuantKvSide s;
  s.data = static_cast<const uint8_t*>(t.raw_data());
  s.bytes = t.nbytes();
  s.codec = c.codec;
  s.mixed = c.mixed ? 1 : 0;
  s.group = c.group;
  // Plain rows: the element width in bits tells f32 from f16.
  s.bits = c.codec == 0 ? static_cast<uint8_t>(t.dtype() == DType::kF16 ? 16 : 32) : c.bits;
  return s;
}

}  // namespace

void run_quantized_paged_attention(CudaBackend& backend, const Tensor& q,
                                   std::span<const int32_t> q_positions,
                                   const ops::QuantPagedKv& kv, Tensor& out, float scale,
                                   Stream* s) {
  OpScope sc(backend, out, s, "quantized_paged_attention");
  const int64_t hkv = static_cast<int64_t>(kv.heads.size());
  const int64_t tq = q.size(0), d = q.size(2);
  if (d > k::kQuantAttentionMaxDim) {
    throw Unsupported(cat("quantized_paged_attention on ", out.device().to_string(), ": head dim ",
                          d, " (the kernel holds at most ", k::kQuantAttentionMaxDim,
                          " channels per row in registers)"));
  }
  int64_t n_pages = 0, n_slots = 0;
  for (const auto& pages : kv.heads) {
    n_pages += static_cast<int64_t>(pages.size());
    for (const ops::QuantKvPage& pg : pages) n_slots += pg.used;
  }
  const int64_t off_begin = n_pages * static_cast<int64_t>(sizeof(k::QuantKvPageDesc));
  const int64_t off_scales = off_begin + (hkv + 1) * 8;
  const int64_t off_qpos = off_scales + align8(hkv * 2 * d * 4);
  const int64_t off_pos = off_qpos + align8(tq * 4);
  const int64_t total = off_pos + n_slots * 4;
  Tensor host = Tensor::empty({total}, DType::kU8);
  Tensor dev = sc.scratch({total}, DType::kU8);
  auto* hb = static_cast<uint8_t*>(host.raw_data());
  auto* db = static_cast<uint8_t*>(dev.raw_data());
  auto* pages_h = reinterpret_cast<k::QuantKvPageDesc*>(hb);
  auto* begin_h = reinterpret_cast<int64_t*>(hb + off_begin);
  auto* scales_h = reinterpret_cast<float*>(hb + off_scales);
  auto* pos_h = reinterpret_cast<int32_t*>(hb + off_pos);
  std::copy(q_positions.begin(), q_positions.end(), reinterpret_cast<int32_t*>(hb + off_qpos));
  std::vector<Tensor> keep{q, out, host};
  int64_t page = 0, slot = 0;
  for (int64_t h = 0; h < hkv; ++h) {
    float* sh = scales_h + h * 2 * d;
    const float* given = h < static_cast<int64_t>(kv.channel_scales.size())
                             ? kv.channel_scales[static_cast<size_t>(h)]
                             : nullptr;
    if (given != nullptr) {
      std::copy(given, given + 2 * d, sh);
    } else {
      std::fill(sh, sh + 2 * d, 1.0f);
    }
    begin_h[h] = page;
    for (const ops::QuantKvPage& pg : kv.heads[static_cast<size_t>(h)]) {
      k::QuantKvPageDesc& o = pages_h[page++];
      o = k::QuantKvPageDesc{};
      o.k = side_of(*pg.k, pg.kq);
      o.v = side_of(*pg.v, pg.vq);
      o.positions = reinterpret_cast<const int32_t*>(db + off_pos) + slot;
      o.used = pg.used;
      o.channel_scaled = pg.channel_scaled ? 1 : 0;
      std::copy(pg.positions, pg.positions + pg.used, pos_h + slot);
      slot += pg.used;
      keep.push_back(*pg.k);
      keep.push_back(*pg.v);
    }
  }
  begin_h[hkv] = page;
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(db, hb, static_cast<size_t>(total), cudaMemcpyHostToDevice, sc.stream()));
  k::QuantPagedAttentionArgs a;
  a.q = ptr<float>(q);
  a.out = ptr<float>(out);
  a.q_pos = reinterpret_cast<const int32_t*>(db + off_qpos);
  a.pages = reinterpret_cast<const k::QuantKvPageDesc*>(db);
  a.head_begin = reinterpret_cast<const int64_t*>(db + off_begin);
  a.channel_scales = reinterpret_cast<const float*>(db + off_scales);
  a.tq = tq;
  a.hq = q.size(1);
  a.hkv = hkv;
  a.d = d;
  a.scale = scale;
  TANDEM_CUDA_CHECK(k::quantized_paged_attention(a, sc.stream()));
  sc.finish(std::move(keep));
}

}  // namespace tandem::cuda
