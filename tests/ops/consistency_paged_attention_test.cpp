// SPDX-License-Identifier: Apache-2.0
// Consistency of paged_attention with the reference kernels, and with plain attention: ragged heads
// (each KV head holds a different token set, as after eviction), partly filled pages, pages of
// different capacities, f32 and f16 pages, GQA groups of 1/3 and MQA, prefill chunks and decode
// steps, queries that see no slot (zeros), and head dims that are not multiples of a vector width.
#include <algorithm>
#include <cmath>
#include <random>

#include "consistency_common.h"

namespace tandem::testing {
namespace {

// The pages of one case, kept alive beside the PagedKv that points into them.
struct Pages {
  std::vector<std::vector<Tensor>> k, v;  // [head][page]
  std::vector<std::vector<std::vector<int32_t>>> pos;
  ops::PagedKv kv;

  void link() {
    kv.heads.assign(k.size(), {});
    for (size_t h = 0; h < k.size(); ++h) {
      for (size_t p = 0; p < k[h].size(); ++p) {
        kv.heads[h].push_back(ops::KvPage{&k[h][p], &v[h][p], pos[h][p].data(),
                                          static_cast<int32_t>(pos[h][p].size())});
      }
    }
  }
};

// Head h keeps each of `tokens` positions with probability keep (always position 0 for h == 0),
// in pages of `capacity` slots; `device` pages are copies of the CPU ones.
void make_pages(int64_t hkv, int64_t tokens, int64_t d, int capacity, DType dtype, double keep,
                uint32_t seed, Pages& cpu, Pages& dev) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution take(keep);
  for (Pages* p : {&cpu, &dev}) {
    p->k.assign(hkv, {});
    p->v.assign(hkv, {});
    p->pos.assign(hkv, {});
  }
  for (int64_t h = 0; h < hkv; ++h) {
    std::vector<int32_t> kept;
    for (int32_t t = 0; t < tokens; ++t) {
      if ((h == 0 && t == 0) || take(rng)) kept.push_back(t);
    }
    for (size_t s = 0; s < kept.size(); s += capacity) {
      const size_t n = std::min<size_t>(capacity, kept.size() - s);
      const uint32_t ps = seed + static_cast<uint32_t>(h * 1000 + s);
      Tensor k = converted(random_tensor({capacity, d}, ps, -2.0f, 2.0f), dtype);
      Tensor v = converted(random_tensor({capacity, d}, ps + 7), dtype);
      std::vector<int32_t> pos(kept.begin() + s, kept.begin() + s + n);
      cpu.k[h].push_back(k);
      cpu.v[h].push_back(v);
      cpu.pos[h].push_back(pos);
      dev.k[h].push_back(on_device(k));
      dev.v[h].push_back(on_device(v));
      dev.pos[h].push_back(pos);
    }
  }
  cpu.link();
  dev.link();
}

struct PagedCase {
  int64_t tq, tokens, hq, hkv, d;
  int capacity;
  DType dtype;
  double keep;
  int32_t first_query;  // position of query 0; queries are consecutive
};

void check_paged(const PagedCase& c, uint32_t seed) {
  const std::string what =
      cat("paged_attention tq=", c.tq, " tokens=", c.tokens, " hq=", c.hq, " hkv=", c.hkv,
          " d=", c.d, " capacity=", c.capacity, " ", dtype_name(c.dtype), " keep=", c.keep);
  SCOPED_TRACE(what);
  Pages cpu, dev;
  make_pages(c.hkv, c.tokens, c.d, c.capacity, c.dtype, c.keep, seed, cpu, dev);
  const Tensor q = random_tensor({c.tq, c.hq, c.d}, seed + 99, -2.0f, 2.0f);
  std::vector<int32_t> qpos(static_cast<size_t>(c.tq));
  for (int64_t i = 0; i < c.tq; ++i) qpos[i] = c.first_query + static_cast<int32_t>(i);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  Tensor want = Tensor::empty({c.tq, c.hq, c.d}, DType::kF32);
  reference().paged_attention(q, qpos, cpu.kv, want, scale, nullptr);
  Guarded out({c.tq, c.hq, c.d}, DType::kF32);
  ops::paged_attention(on_device(q), qpos, dev.kv, out.view());
  expect_close(out.result(what), want, tol::kAttention, what);
}

TEST(PagedAttention, RaggedHeadsAndPages) {
  TANDEM_OPS_PROLOGUE();
  const std::vector<PagedCase> cases = {
      {1, 1, 1, 1, 8, 32, DType::kF32, 1.0, 0},
      {1, 100, 9, 3, 64, 32, DType::kF32, 1.0, 99},   // decode, SmolLM2's heads, full cache
      {1, 300, 9, 3, 64, 32, DType::kF32, 0.3, 299},  // decode over an evicted, ragged cache
      {16, 80, 6, 2, 48, 32, DType::kF32, 0.7, 64},   // prefill chunk over earlier tokens
      {33, 33, 2, 2, 20, 7, DType::kF32, 1.0, 0},     // causal prefill, odd page capacity
      {5, 150, 8, 1, 96, 64, DType::kF32, 0.5, 145},  // MQA, 96-wide heads
      {4, 90, 9, 3, 64, 32, DType::kF16, 0.8, 86},    // f16 pages
      {3, 40, 4, 2, 16, 16, DType::kF32, 1.0, -5},    // queries before every slot: zeros
      // Long decode contexts (many chunks per KV head on CUDA), GQA 8, head dims 128 and 41.
      {1, 3000, 16, 2, 128, 256, DType::kF16, 0.9, 2999},
      {2, 2000, 8, 8, 64, 16, DType::kF16, 0.7, 1990},
      {1, 1500, 24, 3, 41, 32, DType::kF32, 0.8, 1499},
  };
  uint32_t seed = 700;
  for (const PagedCase& c : cases) check_paged(c, seed += 31);
}

// With every token kept, paged attention equals plain causal attention over the contiguous K/V.
TEST(PagedAttention, FullCacheEqualsAttention) {
  TANDEM_OPS_PROLOGUE();
  const int64_t tk = 70, tq = 6, hq = 6, hkv = 2, d = 32;
  const int cap = 16;
  const Tensor q = random_tensor({tq, hq, d}, 5, -2.0f, 2.0f);
  const Tensor k = random_tensor({tk, hkv, d}, 6, -2.0f, 2.0f);
  const Tensor v = random_tensor({tk, hkv, d}, 7);
  Pages dev;
  dev.k.assign(hkv, {});
  dev.v.assign(hkv, {});
  dev.pos.assign(hkv, {});
  for (int64_t h = 0; h < hkv; ++h) {
    for (int64_t s = 0; s < tk; s += cap) {
      const int64_t n = std::min<int64_t>(cap, tk - s);
      Tensor kp = Tensor::zeros({cap, d}, DType::kF32), vp = Tensor::zeros({cap, d}, DType::kF32);
      kp.slice(0, 0, n).copy_from(k.slice(0, s, s + n).select(1, h));
      vp.slice(0, 0, n).copy_from(v.slice(0, s, s + n).select(1, h));
      std::vector<int32_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pos[i] = static_cast<int32_t>(s + i);
      dev.k[h].push_back(on_device(kp));
      dev.v[h].push_back(on_device(vp));
      dev.pos[h].push_back(pos);
    }
  }
  dev.link();
  std::vector<int32_t> qpos(tq);
  for (int64_t i = 0; i < tq; ++i) qpos[i] = static_cast<int32_t>(tk - tq + i);
  Guarded paged({tq, hq, d}, DType::kF32), plain({tq, hq, d}, DType::kF32);
  ops::paged_attention(on_device(q), qpos, dev.kv, paged.view());
  ops::attention(on_device(q), on_device(k), on_device(v), plain.view(), {.causal = true});
  expect_close(paged.result("paged"), plain.result("plain"), tol::kAttention, "paged vs plain");
}

TEST(PagedAttention, RejectsBadPages) {
  TANDEM_OPS_PROLOGUE();
  Tensor q = on_device(random_tensor({1, 2, 8}, 1));
  Tensor out = on_device(random_tensor({1, 2, 8}, 2));
  Tensor k = on_device(random_tensor({4, 8}, 3)), v = on_device(random_tensor({4, 8}, 4));
  Tensor k_wide = on_device(random_tensor({4, 16}, 5));
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4}, qpos = {4};
  ops::PagedKv kv;
  kv.heads = {{ops::KvPage{&k, &v, pos.data(), 5}}};  // 5 used slots in a 4-slot page
  EXPECT_THROW(ops::paged_attention(q, qpos, kv, out), InvalidArgument);
  kv.heads = {{ops::KvPage{&k_wide, &v, pos.data(), 2}}};  // head dim 16 vs 8
  EXPECT_THROW(ops::paged_attention(q, qpos, kv, out), InvalidArgument);
  kv.heads = {{ops::KvPage{&k, &v, pos.data(), 2}}};
  const std::vector<int32_t> two = {1, 2};  // two positions for one query
  EXPECT_THROW(ops::paged_attention(q, two, kv, out), InvalidArgument);
  kv.heads = {{ops::KvPage{&k, &v, pos.data(), 2}}, {}, {}};  // 2 query heads over 3 kv heads
  EXPECT_THROW(ops::paged_attention(q, qpos, kv, out), InvalidArgument);
}

}  // namespace
}  // namespace tandem::testing
