// SPDX-License-Identifier: Apache-2.0
// KvCache: block layout, positions, retain (eviction frees memory), byte accounting, and the cache
// attention kernel against the CPU reference attention op; f16 blocks (rows rounded to half,
// half the bytes by the allocator, attention over them against the reference on the rounded rows
// and against f32 blocks, a model forward with an f16 cache).
#include "tandem/llm/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include <filesystem>

#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

Tensor random_tensor(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, s, DType::kF32);
}

KvCacheShape small_shape() {
  KvCacheShape s;
  s.n_layers = 2;
  s.n_kv_heads = 3;
  s.head_dim = 8;
  s.block_tokens = 4;
  return s;
}

TEST(KvCache, AppendFillsBlocksPerHeadWithPositions) {
  KvCache cache(small_shape());
  Tensor k = random_tensor({6, 3, 8}, 1), v = random_tensor({6, 3, 8}, 2);
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5};
  cache.append(1, k, v, pos);
  EXPECT_EQ(cache.tokens(1, 2), 6);
  EXPECT_EQ(cache.tokens(0, 0), 0);
  EXPECT_EQ(cache.next_position(), 6);
  const auto& blocks = cache.blocks(1, 2);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].used, 4);
  EXPECT_EQ(blocks[1].used, 2);
  EXPECT_EQ(blocks[1].positions, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(blocks[0].dtype, DType::kF32);
  // Slot 5 of head 2 is row 5, head 2 of the input.
  const float* kin = k.data<float>() + (5 * 3 + 2) * 8;
  const float* vin = v.data<float>() + (5 * 3 + 2) * 8;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(blocks[1].k.data<float>()[8 + i], kin[i]);
    EXPECT_EQ(blocks[1].v.data<float>()[8 + i], vin[i]);
  }
}

TEST(KvCache, BytesAreChargedToTheAllocatorAndFreedOnRetainAndClear) {
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  {
    KvCache cache(small_shape());
    std::vector<int32_t> pos(10);
    std::iota(pos.begin(), pos.end(), 0);
    Tensor k = random_tensor({10, 3, 8}, 3), v = random_tensor({10, 3, 8}, 4);
    const int64_t inputs = memory_stats(Device::cpu()).current_bytes - before;
    cache.append(0, k, v, pos);
    // 10 tokens in blocks of 4 -> 3 blocks per head, 3 heads; each block K+V 2*4*8 floats.
    const int64_t expected = 3 * 3 * (2 * 4 * 8 * 4);
    EXPECT_EQ(cache.block_bytes(), 2 * 4 * 8 * 4);
    EXPECT_EQ(cache.bytes(), expected);
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes - before - inputs, expected);

    // Keep 3 of head 1's 10 slots: one block remains for that head.
    const std::vector<int64_t> keep = {1, 6, 9};
    cache.retain(0, 1, keep);
    EXPECT_EQ(cache.tokens(0, 1), 3);
    EXPECT_EQ(cache.tokens(0, 0), 10);
    EXPECT_EQ(cache.blocks(0, 1)[0].positions, (std::vector<int32_t>{1, 6, 9}));
    const float* kin = k.data<float>() + (6 * 3 + 1) * 8;
    for (int i = 0; i < 8; ++i) EXPECT_EQ(cache.blocks(0, 1)[0].k.data<float>()[8 + i], kin[i]);
    const int64_t after_retain = 7 * (2 * 4 * 8 * 4);
    EXPECT_EQ(cache.bytes(), after_retain);
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes - before - inputs, after_retain);
    EXPECT_EQ(cache.next_position(), 10);  // eviction keeps the sequence's positions

    cache.clear();
    EXPECT_EQ(cache.bytes(), 0);
    EXPECT_EQ(cache.next_position(), 0);
    EXPECT_EQ(memory_stats(Device::cpu()).current_bytes - before - inputs, 0);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes, before);
}

// retain() moves kept rows forward in place: the result is every kept row (bit for bit, with its
// position) packed into full blocks, the last partial; a head's rows ahead of the first dropped
// slot stay where they were; nothing is allocated (the allocator's peak does not move); emptied
// blocks are freed. Checked over repeated evictions (one slot at a time, as h2o's decode steps
// do, and many at once), f32 and f16, and a list with a partial block in the middle.
TEST(KvCache, RetainMovesRowsInPlaceAndPacksTheBlocks) {
  for (const DType dtype : {DType::kF32, DType::kF16}) {
    KvCacheShape shape = small_shape();
    shape.dtype = dtype;
    KvCache cache(shape);
    const int64_t n = 23;
    std::vector<int32_t> pos(n);
    std::iota(pos.begin(), pos.end(), 100);
    cache.append(1, random_tensor({n, 3, 8}, 40), random_tensor({n, 3, 8}, 41), pos);
    // The expected head: (position, K row bytes, V row bytes) of every slot, in order.
    const int64_t row = dtype_row_bytes(dtype, 8);
    struct Row {
      int32_t position;
      std::vector<uint8_t> k, v;
    };
    auto rows_of = [&](int head) {
      std::vector<Row> out;
      for (const KvBlock& b : cache.blocks(1, head)) {
        for (int32_t s = 0; s < b.used; ++s) {
          const auto* k = static_cast<const uint8_t*>(b.k.raw_data()) + s * row;
          const auto* v = static_cast<const uint8_t*>(b.v.raw_data()) + s * row;
          out.push_back({b.positions[s], {k, k + row}, {v, v + row}});
        }
      }
      return out;
    };
    std::vector<Row> expect = rows_of(2);
    const void* first_block = cache.blocks(1, 2)[0].k.raw_data();
    std::mt19937_64 rng(7);
    for (int round = 0; round < 12; ++round) {
      const int64_t have = static_cast<int64_t>(expect.size());
      std::vector<int64_t> keep(static_cast<size_t>(have));
      std::iota(keep.begin(), keep.end(), 0);
      // Rounds 0-9 drop one slot after the first block; rounds 10-11 drop every third slot.
      if (round < 10) {
        keep.erase(keep.begin() + 4 + static_cast<int64_t>(rng() % (have - 4)));
      } else {
        std::erase_if(keep, [](int64_t j) { return j % 3 == 1; });
      }
      std::vector<Row> next;
      for (int64_t j : keep) next.push_back(expect[j]);
      expect = std::move(next);
      const int64_t live = memory_stats(Device::cpu()).current_bytes;
      allocator(Device::cpu()).reset_peak();
      cache.retain(1, 2, keep);
      EXPECT_EQ(memory_stats(Device::cpu()).peak_bytes, live) << "retain allocated";
      const auto got = rows_of(2);
      ASSERT_EQ(got.size(), expect.size());
      for (size_t j = 0; j < got.size(); ++j) {
        EXPECT_EQ(got[j].position, expect[j].position) << j;
        EXPECT_EQ(got[j].k, expect[j].k) << j;
        EXPECT_EQ(got[j].v, expect[j].v) << j;
      }
      const auto& blocks = cache.blocks(1, 2);
      ASSERT_EQ(blocks.size(), (expect.size() + 3) / 4);  // packed: full blocks, the last partial
      for (size_t b = 0; b + 1 < blocks.size(); ++b) EXPECT_EQ(blocks[b].used, 4);
      // Heads 0 and 1 of the layer hold 6 blocks each.
      EXPECT_EQ(cache.bytes(), (12 + static_cast<int64_t>(blocks.size())) * cache.block_bytes());
      if (round < 10) EXPECT_EQ(blocks[0].k.raw_data(), first_block) << "the first block moved";
    }
    // A partial block in the middle (replace_blocks may leave one): packed all the same.
    std::vector<KvBlock> ragged = cache.blocks(1, 0);  // 6 blocks: 4 4 4 4 4 3
    ragged[1].used = 2;
    ragged[1].positions.resize(2);
    cache.replace_blocks(1, 0, ragged);
    std::vector<Row> all = rows_of(0);
    const std::vector<int64_t> keep = {0, 3, 4, 5, 6, 7, 8, 9, 10, 12};
    cache.retain(1, 0, keep);
    const auto got = rows_of(0);
    ASSERT_EQ(got.size(), keep.size());
    for (size_t j = 0; j < keep.size(); ++j) {
      EXPECT_EQ(got[j].position, all[keep[j]].position);
      EXPECT_EQ(got[j].k, all[keep[j]].k);
    }
    EXPECT_EQ(cache.blocks(1, 0).size(), 3u);
    cache.retain(1, 0, {});
    EXPECT_EQ(cache.tokens(1, 0), 0);
  }
}

TEST(KvCache, RejectsBadArguments) {
  EXPECT_THROW(KvCache(KvCacheShape{}), InvalidArgument);
  KvCache cache(small_shape());
  std::vector<int32_t> pos = {0, 1};
  Tensor wrong = random_tensor({2, 2, 8}, 5);
  EXPECT_THROW(cache.append(0, wrong, wrong, pos), InvalidArgument);
  Tensor k = random_tensor({2, 3, 8}, 6);
  EXPECT_THROW(cache.append(2, k, k, pos), InvalidArgument);
  cache.append(0, k, k, pos);
  const std::vector<int64_t> unsorted = {1, 0}, outside = {2};
  EXPECT_THROW(cache.retain(0, 0, unsorted), InvalidArgument);
  EXPECT_THROW(cache.retain(0, 0, outside), InvalidArgument);
  EXPECT_EQ(cache.tokens(0, 0), 2);
}

TEST(KvCache, FullPolicyIsTheDefault) {
  KvCache cache(small_shape());
  EXPECT_EQ(cache.policy().name(), "full");
}

// cache_attention over blocks == the reference attention op over the same K/V (GQA, causal),
// for a chunk of queries that continues a cached prefix, with blocks that end mid-chunk.
TEST(CacheAttention, MatchesReferenceAttention) {
  const int64_t prefix = 7, t = 5, hq = 6, hkv = 2, d = 16;
  KvCacheShape s;
  s.n_layers = 1;
  s.n_kv_heads = hkv;
  s.head_dim = d;
  s.block_tokens = 3;
  KvCache cache(s);
  Tensor k = random_tensor({prefix + t, hkv, d}, 7), v = random_tensor({prefix + t, hkv, d}, 8);
  std::vector<int32_t> pos(prefix + t);
  std::iota(pos.begin(), pos.end(), 0);
  cache.append(0, k.slice(0, 0, prefix).contiguous(), v.slice(0, 0, prefix).contiguous(),
               std::span<const int32_t>(pos).first(prefix));
  cache.append(0, k.slice(0, prefix, prefix + t).contiguous(),
               v.slice(0, prefix, prefix + t).contiguous(),
               std::span<const int32_t>(pos).subspan(prefix));
  Tensor q = random_tensor({t, hq, d}, 9);
  Tensor out = Tensor::empty({t, hq, d}, DType::kF32);
  cache_attention(q, std::span<const int32_t>(pos).subspan(prefix), cache, 0, out);

  Tensor want = Tensor::empty({t, hq, d}, DType::kF32);
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));  // the kernel table takes resolved params
  p.causal = true;
  p.q_offset = prefix;
  ops::cpu_reference_kernels().attention(q, k, v, want, p, nullptr, nullptr);
  const auto a = out.to_float_vector(), b = want.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "at " << i;
}

// After eviction a query attends only to the kept slots: equal to reference attention over them.
TEST(CacheAttention, AttendsToRetainedSlotsOnly) {
  const int64_t n = 9, d = 8;
  KvCacheShape s;
  s.n_layers = 1;
  s.n_kv_heads = 1;
  s.head_dim = d;
  s.block_tokens = 4;
  KvCache cache(s);
  Tensor k = random_tensor({n, 1, d}, 10), v = random_tensor({n, 1, d}, 11);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  cache.append(0, k, v, pos);
  const std::vector<int64_t> keep = {0, 3, 4, 8};
  cache.retain(0, 0, keep);
  Tensor q = random_tensor({1, 2, d}, 12);
  Tensor out = Tensor::empty({1, 2, d}, DType::kF32);
  const std::vector<int32_t> qpos = {9};
  cache_attention(q, qpos, cache, 0, out);

  Tensor kk = Tensor::empty({4, 1, d}, DType::kF32), vk = Tensor::empty({4, 1, d}, DType::kF32);
  for (int i = 0; i < 4; ++i) {
    kk.slice(0, i, i + 1).copy_from(k.slice(0, keep[i], keep[i] + 1));
    vk.slice(0, i, i + 1).copy_from(v.slice(0, keep[i], keep[i] + 1));
  }
  Tensor want = Tensor::empty({1, 2, d}, DType::kF32);
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.causal = false;
  ops::cpu_reference_kernels().attention(q, kk, vk, want, p, nullptr, nullptr);
  const auto a = out.to_float_vector(), b = want.to_float_vector();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << "at " << i;
}

// ---- f16 blocks ----------------------------------------------------------------------------

// x rounded to f16 and back (what an f16 block stores).
Tensor rounded_to_f16(const Tensor& x) {
  std::vector<float> v = x.to_float_vector();
  for (float& e : v) e = f16_to_f32(f32_to_f16(e));
  return Tensor::from_vector(v, x.shape(), DType::kF32);
}

TEST(KvCacheF16, RowsAreRoundedAndBytesHalve) {
  KvCacheShape s16 = small_shape();
  s16.dtype = DType::kF16;
  Tensor k = random_tensor({6, 3, 8}, 21), v = random_tensor({6, 3, 8}, 22);
  const std::vector<int32_t> pos = {0, 1, 2, 3, 4, 5};
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  int64_t f32_bytes = 0;
  {
    KvCache c32(small_shape());
    c32.append(0, k, v, pos);
    f32_bytes = memory_stats(Device::cpu()).current_bytes - before;
    EXPECT_EQ(f32_bytes, c32.bytes());
  }
  KvCache c16(s16);
  c16.append(0, k, v, pos);
  const int64_t f16_bytes = memory_stats(Device::cpu()).current_bytes - before;
  EXPECT_EQ(f16_bytes, c16.bytes());
  EXPECT_EQ(2 * f16_bytes, f32_bytes);  // measured by the allocator
  EXPECT_EQ(c16.block_bytes(), 2 * 4 * 8 * 2);
  const auto& blocks = c16.blocks(0, 1);
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].dtype, DType::kF16);
  EXPECT_EQ(blocks[0].k.dtype(), DType::kF16);
  // Slot 5 of head 1 holds row 5, head 1, rounded to half.
  const auto* kh = static_cast<const uint16_t*>(blocks[1].k.raw_data());
  const auto* vh = static_cast<const uint16_t*>(blocks[1].v.raw_data());
  const float* kin = k.data<float>() + (5 * 3 + 1) * 8;
  const float* vin = v.data<float>() + (5 * 3 + 1) * 8;
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(kh[8 + i], f32_to_f16(kin[i]));
    EXPECT_EQ(vh[8 + i], f32_to_f16(vin[i]));
  }
  // retain keeps the half rows bit for bit and frees the dropped block.
  const std::vector<int64_t> keep = {1, 5};
  c16.retain(0, 1, keep);
  ASSERT_EQ(c16.blocks(0, 1).size(), 1u);
  EXPECT_EQ(c16.blocks(0, 1)[0].dtype, DType::kF16);
  EXPECT_EQ(static_cast<const uint16_t*>(c16.blocks(0, 1)[0].k.raw_data())[8], kh[8]);
  EXPECT_EQ(memory_stats(Device::cpu()).current_bytes - before, c16.bytes());
  KvCacheShape bad = small_shape();
  bad.dtype = DType::kQ8_0;
  EXPECT_THROW(KvCache{bad}, Unsupported);
}

TEST(KvCacheF16, AttentionMatchesReferenceOnRoundedRowsAndF32Blocks) {
  const int64_t hq = 6, hkv = 2, d = 16, prefix = 7, t = 5;
  KvCacheShape s;
  s.n_layers = 1;
  s.n_kv_heads = hkv;
  s.head_dim = d;
  s.block_tokens = 4;
  KvCacheShape s16 = s;
  s16.dtype = DType::kF16;
  KvCache c32(s), c16(s16);
  Tensor k = random_tensor({prefix + t, hkv, d}, 31), v = random_tensor({prefix + t, hkv, d}, 32);
  std::vector<int32_t> pos(prefix + t);
  std::iota(pos.begin(), pos.end(), 0);
  c32.append(0, k, v, pos);
  c16.append(0, k, v, pos);
  Tensor q = random_tensor({t, hq, d}, 33);
  const std::span<const int32_t> qpos = std::span<const int32_t>(pos).subspan(prefix);
  Tensor o32 = Tensor::empty({t, hq, d}, DType::kF32), o16 = Tensor::empty({t, hq, d}, DType::kF32);
  cache_attention(q, qpos, c32, 0, o32);
  cache_attention(q, qpos, c16, 0, o16);
  // The f16 kernel is exact attention over the rounded rows...
  Tensor want = Tensor::empty({t, hq, d}, DType::kF32);
  ops::AttentionParams p;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  p.causal = true;
  p.q_offset = prefix;
  ops::cpu_reference_kernels().attention(q, rounded_to_f16(k), rounded_to_f16(v), want, p, nullptr,
                                         nullptr);
  const auto a = o16.to_float_vector(), b = want.to_float_vector(), c = o32.to_float_vector();
  float vs_f32 = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5) << "at " << i;
    vs_f32 = std::max(vs_f32, std::abs(a[i] - c[i]));
  }
  // ...and within half precision of attention over f32 blocks.
  EXPECT_LE(vs_f32, 5e-3f);
  EXPECT_GT(vs_f32, 0.0f);  // the rows really were rounded
}

TEST(KvCacheF16, ModelForwardWithF16CacheStaysClose) {
  const Model m = Model::load(
      ((std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data" / "gpt2_tiny.gguf")
          .string());
  std::vector<int32_t> ids(20), pos(20);
  for (int i = 0; i < 20; ++i) ids[i] = (7 * i + 3) % 64, pos[i] = i;
  KvCache c32 = m.make_cache(), c16 = m.make_cache(nullptr, 8, DType::kF16);
  const auto a = m.forward(ids, pos, c32).to_float_vector();
  const auto b = m.forward(ids, pos, c16).to_float_vector();
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  EXPECT_LE(worst, 2e-2f);
  EXPECT_EQ(c16.blocks(0, 0).front().dtype, DType::kF16);
  EXPECT_EQ(c16.tokens(1, 0), 20);
}

}  // namespace
}  // namespace tandem::llm
