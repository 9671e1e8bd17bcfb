// SPDX-License-Identifier: Apache-2.0
// The CUDA paged attention's chunk plan and softmax merge (backends/cuda/kernels/flash_decode.h)
// compiled for the host, on a machine without a GPU: the split (each chunk of a KV head's slots
// folded tile by tile into per-query-head (max, sum, accumulator) states, slots located with
// advance_slots as the kernel locates them) and the merge run on the CPU over random paged caches
// and are compared with the CPU reference paged attention. Caches: ragged heads (random tokens
// kept per head), partly filled and empty pages, page capacities 7 / 16 / 256, f32 and f16 pages,
// GQA ratios 1 / 3 / 8, head dims 64 / 128 / 41, decode rows and prefill chunks, queries that see
// no slot, and chunk lengths from 1 slot to the whole head. Tolerance: f32 against the reference's
// double accumulation (the kernel's own f32 tolerance in the consistency suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "../../backends/cuda/kernels/flash_decode.h"
#include "tandem/core/dtype.h"
#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem {
namespace {

using cuda::FlashChunk;

struct Cache {
  std::vector<std::vector<Tensor>> k, v;  // [head][page]
  std::vector<std::vector<std::vector<int32_t>>> pos;
  ops::PagedKv kv;
};

// Head h keeps each of `tokens` positions with probability keep, in pages of `capacity` slots;
// every third head also gets an empty page in the middle and one at the end.
void make_cache(int64_t hkv, int64_t tokens, int64_t d, int capacity, DType dt, double keep,
                uint32_t seed, Cache& c) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution take(keep);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  c.k.assign(hkv, {});
  c.v.assign(hkv, {});
  c.pos.assign(hkv, {});
  const auto page = [&](int64_t h, std::vector<int32_t> pos) {
    std::vector<float> kv(static_cast<size_t>(2 * capacity * d));
    for (float& x : kv) x = u(rng);
    Tensor kf = Tensor::from_vector(std::vector<float>(kv.begin(), kv.begin() + capacity * d),
                                    {capacity, d}, DType::kF32);
    Tensor vf = Tensor::from_vector(std::vector<float>(kv.begin() + capacity * d, kv.end()),
                                    {capacity, d}, DType::kF32);
    Tensor kt = Tensor::empty({capacity, d}, dt), vt = Tensor::empty({capacity, d}, dt);
    ops::convert(kf, kt);
    ops::convert(vf, vt);
    c.k[h].push_back(kt);
    c.v[h].push_back(vt);
    c.pos[h].push_back(std::move(pos));
  };
  for (int64_t h = 0; h < hkv; ++h) {
    std::vector<int32_t> kept;
    for (int32_t t = 0; t < tokens; ++t)
      if (take(rng)) kept.push_back(t);
    for (size_t s = 0; s < kept.size(); s += capacity) {
      page(h, std::vector<int32_t>(kept.begin() + s,
                                   kept.begin() + s + std::min<size_t>(capacity, kept.size() - s)));
      if (h % 3 == 1 && s == 0) page(h, {});
    }
    if (h % 3 == 1) page(h, {});
  }
  c.kv.heads.assign(hkv, {});
  for (int64_t h = 0; h < hkv; ++h)
    for (size_t p = 0; p < c.k[h].size(); ++p)
      c.kv.heads[h].push_back(ops::KvPage{&c.k[h][p], &c.v[h][p], c.pos[h][p].data(),
                                          static_cast<int32_t>(c.pos[h][p].size())});
}

float element(const Tensor& rows, int64_t slot, int64_t j, int64_t d) {
  if (rows.dtype() == DType::kF16)
    return f16_to_f32(static_cast<const uint16_t*>(rows.raw_data())[slot * d + j]);
  return static_cast<const float*>(rows.raw_data())[slot * d + j];
}

// The split and merge on the host; tiles of `tile` slots as the kernel's kKeyTile.
Tensor flash_on_host(const Tensor& q, const std::vector<int32_t>& qpos, const ops::PagedKv& kv,
                     float scale, int64_t chunk_slots, int tile) {
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2);
  const auto hkv = static_cast<int64_t>(kv.heads.size());
  const int64_t group = hq / hkv;
  std::vector<const ops::KvPage*> pages;
  std::vector<int32_t> used;
  std::vector<int64_t> head_page_begin;
  for (const auto& hp : kv.heads) {
    head_page_begin.push_back(static_cast<int64_t>(pages.size()));
    for (const ops::KvPage& pg : hp) {
      pages.push_back(&pg);
      used.push_back(pg.used);
    }
  }
  head_page_begin.push_back(static_cast<int64_t>(pages.size()));
  std::vector<FlashChunk> chunks;
  std::vector<int64_t> head_chunk_begin;
  cuda::plan_flash_chunks(used, head_page_begin, chunk_slots, chunks, head_chunk_begin);
  // Every head's chunks cover its slots once, in order, none longer than chunk_slots.
  for (int64_t h = 0; h < hkv; ++h) {
    int64_t covered = 0, total = 0;
    for (int64_t p = head_page_begin[h]; p < head_page_begin[h + 1]; ++p) total += used[p];
    for (int64_t c = head_chunk_begin[h]; c < head_chunk_begin[h + 1]; ++c) {
      EXPECT_EQ(chunks[c].head, h);
      EXPECT_LE(chunks[c].count, chunk_slots);
      EXPECT_LT(chunks[c].slot, used[chunks[c].page]) << "chunk " << c << " starts on no slot";
      covered += chunks[c].count;
    }
    EXPECT_EQ(covered, total) << "head " << h;
  }
  const auto used_of = [&](int32_t p) { return static_cast<int64_t>(used[p]); };
  const auto n_chunks = static_cast<int64_t>(chunks.size());
  const int64_t stride = group * (d + 2);
  std::vector<float> partial(static_cast<size_t>(tq * n_chunks * stride));
  const float* qd = q.data<float>();
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t c = 0; c < n_chunks; ++c) {
      const FlashChunk ch = chunks[c];
      std::vector<float> m(group, -INFINITY), l(group, 0.0f), acc(group * d, 0.0f);
      std::vector<float> p(group * tile);
      int32_t page = ch.page, slot = ch.slot;
      int32_t prev_pos = -1;
      for (int32_t t0 = 0; t0 < ch.count; t0 += tile) {
        const int nt = std::min(tile, ch.count - t0);
        for (int kk = 0; kk < nt; ++kk) {
          int32_t pp = page, ss = slot;
          cuda::advance_slots(pp, ss, kk, used_of);
          const ops::KvPage& pg = *pages[pp];
          // Slots come in page order: positions strictly increase within a head here.
          EXPECT_GT(pg.positions[ss], prev_pos);
          prev_pos = pg.positions[ss];
          for (int64_t g = 0; g < group; ++g) {
            float s = -INFINITY;
            if (pg.positions[ss] <= qpos[i]) {
              s = 0.0f;
              const float* qr = qd + (i * hq + ch.head * group + g) * d;
              for (int64_t j = 0; j < d; ++j) s += qr[j] * scale * element(*pg.k, ss, j, d);
            }
            p[g * tile + kk] = s;
          }
        }
        for (int64_t g = 0; g < group; ++g) {
          float tmax = -INFINITY;
          for (int kk = 0; kk < nt; ++kk) tmax = std::max(tmax, p[g * tile + kk]);
          const float m_new = std::max(m[g], tmax), corr = cuda::rescale(m[g], m_new);
          float tsum = 0.0f;
          for (int kk = 0; kk < nt; ++kk) {
            p[g * tile + kk] = cuda::weight(p[g * tile + kk], m_new);
            tsum += p[g * tile + kk];
          }
          m[g] = m_new;
          l[g] = l[g] * corr + tsum;
          for (int64_t j = 0; j < d; ++j) acc[g * d + j] *= corr;
        }
        int32_t pp = page, ss = slot;
        for (int kk = 0; kk < nt; ++kk) {
          const ops::KvPage& pg = *pages[pp];
          for (int64_t g = 0; g < group; ++g)
            for (int64_t j = 0; j < d; ++j) acc[g * d + j] += p[g * tile + kk] * element(*pg.v, ss, j, d);
          if (kk + 1 < nt) cuda::advance_slots(pp, ss, 1, used_of);
        }
        if (t0 + nt < ch.count) cuda::advance_slots(page, slot, nt, used_of);
      }
      float* part = partial.data() + (i * n_chunks + c) * stride;
      for (int64_t g = 0; g < group; ++g) {
        part[g * (d + 2)] = m[g];
        part[g * (d + 2) + 1] = l[g];
        std::copy(acc.begin() + g * d, acc.begin() + (g + 1) * d, part + g * (d + 2) + 2);
      }
    }
  }
  Tensor out = Tensor::empty({tq, hq, d}, DType::kF32);
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t hk = h / group, c0 = head_chunk_begin[hk], n = head_chunk_begin[hk + 1] - c0;
      const float* base = partial.data() + (i * n_chunks + c0) * stride + (h - hk * group) * (d + 2);
      float inv = 0.0f;
      const float mx = n > 0 ? cuda::merge_states(base, base + 1, n, stride, &inv) : -INFINITY;
      for (int64_t j = 0; j < d; ++j) {
        float o = 0.0f;
        for (int64_t cc = 0; cc < n; ++cc)
          o += cuda::rescale(base[cc * stride], mx) * base[cc * stride + 2 + j];
        out.data<float>()[(i * hq + h) * d + j] = o * inv;
      }
    }
  }
  return out;
}

struct Case {
  int64_t tq, tokens, hq, hkv, d;
  int capacity;
  DType dt;
  double keep;
  int32_t first_query;
};

TEST(CudaFlashDecodeOnHost, SplitAndMergeEqualTheReference) {
  const std::vector<Case> cases = {
      {1, 700, 8, 8, 64, 16, DType::kF16, 0.6, 699},    // GQA 1, small pages
      {1, 900, 9, 3, 64, 7, DType::kF32, 0.8, 899},     // GQA 3 (SmolLM2), odd capacity
      {1, 1200, 16, 2, 128, 256, DType::kF16, 1.0, 1199},  // GQA 8, 128-wide heads, large pages
      {3, 400, 24, 3, 41, 16, DType::kF32, 0.5, 300},   // GQA 8, d 41, prefill rows, some masked
      {2, 50, 6, 2, 41, 7, DType::kF16, 1.0, -3},       // queries before every slot: zeros
  };
  uint32_t seed = 41;
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "tq " << c.tq << " tokens " << c.tokens << " hq " << c.hq
                                    << " hkv " << c.hkv << " d " << c.d << " capacity "
                                    << c.capacity << " " << dtype_name(c.dt));
    Cache cache;
    make_cache(c.hkv, c.tokens, c.d, c.capacity, c.dt, c.keep, seed += 13, cache);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    std::vector<float> qv(static_cast<size_t>(c.tq * c.hq * c.d));
    for (float& x : qv) x = u(rng);
    const Tensor q = Tensor::from_vector(qv, {c.tq, c.hq, c.d}, DType::kF32);
    std::vector<int32_t> qpos(static_cast<size_t>(c.tq));
    for (int64_t i = 0; i < c.tq; ++i) qpos[i] = c.first_query + static_cast<int32_t>(i) * 40;
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    Tensor want = Tensor::empty({c.tq, c.hq, c.d}, DType::kF32);
    ops::cpu_reference_kernels().paged_attention(q, qpos, cache.kv, want, scale, nullptr);
    int64_t max_head = 0;
    for (const auto& hp : cache.kv.heads) {
      int64_t n = 0;
      for (const ops::KvPage& pg : hp) n += pg.used;
      max_head = std::max(max_head, n);
    }
    for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{64},
                          cuda::flash_chunk_slots(c.tq, c.hkv, max_head), max_head + 1}) {
      SCOPED_TRACE(testing::Message() << "chunk " << chunk);
      const Tensor got = flash_on_host(q, qpos, cache.kv, scale, chunk, 64);
      double worst = 0.0;
      for (int64_t x = 0; x < want.numel(); ++x) {
        const double w = want.data<float>()[x], g = got.data<float>()[x];
        worst = std::max(worst, std::fabs(g - w) / (2e-6 + 5e-5 * std::fabs(w)));
      }
      EXPECT_LE(worst, 1.0);
    }
  }
}

TEST(CudaFlashDecodeOnHost, ChunkLengthFillsTheGpuAndStaysLong) {
  // Decode of one row over 8 KV heads at 8k context: enough chunks for ~1024 blocks.
  const int64_t decode = cuda::flash_chunk_slots(1, 8, 8192);
  EXPECT_EQ(8192 / decode * 8, 1024);
  // Never shorter than kFlashMinChunk, and one chunk per head once rows x heads fill the GPU.
  EXPECT_EQ(cuda::flash_chunk_slots(1, 32, 100), 100 / 2 + 100 % 2);
  EXPECT_EQ(cuda::flash_chunk_slots(1, 8, 10), cuda::kFlashMinChunk);
  EXPECT_EQ(cuda::flash_chunk_slots(512, 8, 4096), 4096);
  // advance_slots skips empty pages and lands on the slot `offset` used slots ahead.
  const std::vector<int32_t> used = {0, 3, 0, 0, 2, 5};
  const auto used_of = [&](int32_t p) { return static_cast<int64_t>(used[p]); };
  int32_t page = 0, slot = 0;
  cuda::advance_slots(page, slot, 0, used_of);
  EXPECT_EQ(page, 1);
  EXPECT_EQ(slot, 0);
  cuda::advance_slots(page, slot, 3, used_of);
  EXPECT_EQ(page, 4);
  EXPECT_EQ(slot, 0);
  cuda::advance_slots(page, slot, 6, used_of);
  EXPECT_EQ(page, 5);
  EXPECT_EQ(slot, 4);
}

}  // namespace
}  // namespace tandem
