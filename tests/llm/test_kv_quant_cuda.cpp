// SPDX-License-Identifier: Apache-2.0
// Quantized KV caches on cuda:0 against the same caches on the CPU. (1) The CUDA kernel that reads
// K/V codes in place against the CPU quantized attention, on identical blocks of every format
// (affine 8/4/2-bit with and without groups, q8_0, q4_0, symmetric 8/4, mixed 8/4 with its bitmap,
// per-channel 2/4/8), odd head dims, ragged blocks with position gaps, heads with different token
// sets, an f32 residual block, a query that sees nothing, GQA groups 1 and 3, and channel scales.
// (2) The registered policies (int4, q4_0, kivi2, qokv, qokv with a calibration file) on a GPU
// cache: prefill, decode steps and eviction (retain re-encodes kept codes) give the same codes and
// attention outputs within 1e-4 relative as on a CPU cache. (3) ops::convert f32 -> q8_0 / q4_0 /
// q4_1 on CUDA writes the CPU's bytes. Skipped where no usable GPU exists (TANDEM_REQUIRE_GPU=1:
// fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "common/temp_dir.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

const Device kGpu = Device::cuda(0);

std::vector<float> normal(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

Tensor host_tensor(const Shape& s, uint64_t seed) {
  return Tensor::from_vector(normal(static_cast<size_t>(s.numel()), seed), s, DType::kF32);
}

Tensor attend(const KvCache& cache, int layer, const Tensor& q_host, std::span<const int32_t> pos) {
  const Device dev = cache.shape().device;
  const Tensor q = dev.is_cpu() ? q_host : q_host.to(dev);
  Tensor out = Tensor::empty(q.shape(), DType::kF32, dev);
  cache_attention(q, pos, cache, layer, out);
  return dev.is_cpu() ? out : out.to(Device::cpu());
}

// Every element within 1e-4 of the CPU's, relative to the larger of |cpu| and the mean |cpu|.
void expect_close(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  const float* a = cpu.data<float>();
  const float* b = gpu.data<float>();
  double mean = 0;
  for (int64_t i = 0; i < cpu.numel(); ++i) mean += std::fabs(a[i]);
  mean /= static_cast<double>(std::max<int64_t>(1, cpu.numel()));
  int bad = 0;
  for (int64_t i = 0; i < cpu.numel() && bad < 5; ++i) {
    const double tol = 1e-4 * std::max<double>(std::fabs(a[i]), mean);
    if (!(std::fabs(static_cast<double>(a[i]) - b[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " cpu " << a[i] << " gpu " << b[i];
      ++bad;
    }
  }
}

// ------------------------------------------------------------------ the kernel, block by block

struct FormatCase {
  const char* name;
  KvQuantFormat k, v;
};

std::vector<FormatCase> formats() {
  const auto affine = [](int bits, int group) {
    return KvQuantFormat{KvCodec::kAffine, static_cast<uint8_t>(bits), static_cast<uint16_t>(group),
                         false};
  };
  const KvQuantFormat q8{KvCodec::kBlock32, 8, 0, false}, q4{KvCodec::kBlock32, 4, 0, false};
  const KvQuantFormat s8{KvCodec::kSymmetric, 8, 0, false}, s4{KvCodec::kSymmetric, 4, 0, false};
  const KvQuantFormat mixed{KvCodec::kSymmetric, 8, 0, true};
  const KvQuantFormat c2{KvCodec::kChannel, 2, 0, false}, c4{KvCodec::kChannel, 4, 0, false},
      c8{KvCodec::kChannel, 8, 0, false};
  return {
      {"affine8", affine(8, 0), affine(8, 0)},
      {"affine4", affine(4, 0), affine(4, 0)},
      {"affine2/g32", affine(2, 32), affine(2, 32)},
      {"affine4/g32", affine(4, 32), affine(4, 32)},
      {"q8_0", q8, q8},
      {"q4_0", q4, q4},
      {"sym8", s8, s8},
      {"sym4", s4, s4},
      {"sym8/4 keys, sym4 values", mixed, s4},
      {"chan2 keys, affine2/g32 values", c2, affine(2, 32)},
      {"chan4 keys, affine4/g32 values", c4, affine(4, 32)},
      {"chan8", c8, c8},
  };
}

// The quantized blocks of one head: (first position, slots, position step) each.
struct BlockPlan {
  int32_t first, used, step;
};

// One cache on `dev` with one layer of hkv heads: per head, quantized blocks from the plan (head 1
// skips the second block: heads hold different token sets), then 5 f32 tokens at positions
// 100..104 appended to every head (f32 or f16 rows: `residual`). With `scaled`, head 0 has channel
// scales and its quantized blocks are channel-scaled. The same seeds give the same rows (and
// codes) on every device.
KvCache build_cache(Device dev, const FormatCase& f, int d, int hkv, bool scaled,
                    DType residual = DType::kF32) {
  KvCacheShape cs;
  cs.n_layers = 1;
  cs.n_kv_heads = hkv;
  cs.head_dim = d;
  cs.block_tokens = 32;
  cs.device = dev;
  cs.dtype = residual;
  KvCache cache(cs);
  const std::vector<BlockPlan> plan = {{10, 32, 1}, {42, 7, 2}, {57, 19, 1}, {76, 1, 1}};
  uint64_t seed = 1000;
  for (int h = 0; h < hkv; ++h) {
    const bool head_scaled = scaled && h == 0;
    if (head_scaled) {
      std::vector<float> sk(d), sv(d);
      for (int i = 0; i < d; ++i) {
        sk[i] = 1.0f + 0.25f * static_cast<float>(i % 7);
        sv[i] = 1.0f + 0.5f * static_cast<float>(i % 3);
      }
      cache.set_channel_scales(0, h, sk, sv);
    }
    std::vector<KvBlock> blocks;
    for (size_t bi = 0; bi < plan.size(); ++bi) {
      if (h == 1 && bi == 1) continue;
      const BlockPlan& p = plan[bi];
      std::vector<int32_t> pos(p.used);
      for (int s = 0; s < p.used; ++s) pos[s] = p.first + s * p.step;
      const std::vector<float> k = normal(static_cast<size_t>(p.used) * d, ++seed);
      const std::vector<float> v = normal(static_cast<size_t>(p.used) * d, ++seed);
      std::vector<uint8_t> wide;
      if (f.k.mixed) {
        for (int s = 0; s < p.used; ++s) wide.push_back(static_cast<uint8_t>((s * 5 + h) % 3 == 0));
      }
      blocks.push_back(kv_make_block(cache, f.k, f.v, k.data(), v.data(), pos, wide, head_scaled));
    }
    cache.replace_blocks(0, h, std::move(blocks));
  }
  Tensor kr = host_tensor({5, hkv, d}, 77), vr = host_tensor({5, hkv, d}, 78);
  if (!dev.is_cpu()) kr = kr.to(dev), vr = vr.to(dev);
  const std::vector<int32_t> rpos = {100, 101, 102, 103, 104};
  cache.append(0, kr, vr, rpos);
  return cache;
}

TEST(KvQuantCuda, KernelMatchesTheCpuForEveryFormat) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  // Query positions: 5 sees nothing, 20 part of the first block, 50 stops inside the strided
  // block, 104 sees everything (the f32 residual too).
  const std::vector<int32_t> qpos = {5, 20, 50, 104};
  for (const FormatCase& f : formats()) {
    for (int d : {64, 41}) {
      for (int group : {1, 3}) {
        for (bool scaled : {false, true}) {
          const std::string what =
              cat(f.name, " d ", d, " group ", group, scaled ? " channel-scaled" : "");
          SCOPED_TRACE(what);
          const int hkv = 2;
          const KvCache cpu = build_cache(Device::cpu(), f, d, hkv, scaled);
          const KvCache gpu = build_cache(kGpu, f, d, hkv, scaled);
          ASSERT_TRUE(gpu.has_quantized(0));
          ASSERT_EQ(gpu.blocks(0, 0)[0].k.device(), kGpu);
          ASSERT_EQ(gpu.bytes(), cpu.bytes());
          const Tensor q = host_tensor({4, hkv * group, d}, 4242 + d + group);
          const Tensor a = attend(cpu, 0, q, qpos), b = attend(gpu, 0, q, qpos);
          expect_close(a, b, what);
          for (int64_t i = 0; i < hkv * group * d; ++i) {  // the first query sees no slot
            ASSERT_EQ(b.data<float>()[i], 0.0f) << what;
          }
          // The codes read back from the device decode to the CPU cache's rows exactly.
          std::vector<float> k1, v1, k2, v2;
          kv_block_rows(cpu, 0, 0, cpu.blocks(0, 0)[2], k1, v1);
          kv_block_rows(gpu, 0, 0, gpu.blocks(0, 0)[2], k2, v2);
          EXPECT_EQ(k1, k2);
          EXPECT_EQ(v1, v2);
        }
      }
    }
  }
}

TEST(KvQuantCuda, KernelReadsF16ResidualBlocks) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const std::vector<int32_t> qpos = {50, 104, 104};
  const std::vector<FormatCase> fs = formats();
  for (const FormatCase& f : {fs[5], fs[8], fs[9]}) {  // q4_0, mixed 8/4, per-channel 2-bit
    SCOPED_TRACE(f.name);
    const KvCache cpu = build_cache(Device::cpu(), f, 64, 2, true, DType::kF16);
    const KvCache gpu = build_cache(kGpu, f, 64, 2, true, DType::kF16);
    ASSERT_EQ(gpu.blocks(0, 1).back().dtype, DType::kF16);
    const Tensor q = host_tensor({3, 6, 64}, 99);
    expect_close(attend(cpu, 0, q, qpos), attend(gpu, 0, q, qpos), f.name);
  }
}

TEST(KvQuantCuda, BadPagesGiveClearErrors) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const FormatCase f = formats()[1];  // affine4
  KvCache gpu = build_cache(kGpu, f, 64, 2, false);
  const std::vector<int32_t> qpos = {104};
  const Tensor q = host_tensor({1, 2, 64}, 5);
  // Codes of the wrong size for the block's format.
  std::vector<KvBlock> blocks = gpu.blocks(0, 0);
  blocks[0].k = Tensor::zeros({10}, DType::kU8, kGpu);
  gpu.replace_blocks(0, 0, blocks);
  EXPECT_THROW(attend(gpu, 0, q, qpos), InvalidArgument);
  // A channel-scaled block in a head without scales.
  KvCache gpu2 = build_cache(kGpu, f, 64, 2, false);
  blocks = gpu2.blocks(0, 1);
  blocks[0].channel_scaled = true;
  gpu2.replace_blocks(0, 1, blocks);
  EXPECT_THROW(attend(gpu2, 0, q, qpos), InvalidArgument);
  // Head dims the register kernel cannot hold.
  KvCacheShape cs;
  cs.n_layers = 1, cs.n_kv_heads = 1, cs.head_dim = 320, cs.device = kGpu;
  KvCache wide(cs);
  const std::vector<float> rows = normal(320, 3);
  const std::vector<int32_t> pos = {0};
  const KvQuantFormat s8{KvCodec::kSymmetric, 8, 0, false};
  wide.replace_blocks(0, 0, {kv_make_block(wide, s8, s8, rows.data(), rows.data(), pos)});
  const Tensor qw = host_tensor({1, 1, 320}, 6);
  const std::vector<int32_t> qp = {0};
  EXPECT_THROW(attend(wide, 0, qw, qp), Unsupported);
}

// ------------------------------------------------------------------ policies on a GPU cache

constexpr int kLayers = 2, kKv = 2, kHeads = 6, kDim = 64, kPrompt = 150;

KvCacheShape policy_shape(Device dev) {
  KvCacheShape s;
  s.n_layers = kLayers;
  s.n_kv_heads = kKv;
  s.head_dim = kDim;
  s.block_tokens = 32;
  s.device = dev;
  return s;
}

// Appends tokens [first, first + n) of a deterministic stream (keys with an outlier channel).
void append_tokens(KvCache& cache, int32_t first, int n) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::iota(pos.begin(), pos.end(), first);
  for (int l = 0; l < kLayers; ++l) {
    Tensor k = host_tensor({n, kKv, kDim}, 31 * first + l);
    Tensor v = host_tensor({n, kKv, kDim}, 57 * first + 10 + l);
    float* kd = k.data<float>();
    for (int t = 0; t < n; ++t) {
      for (int h = 0; h < kKv; ++h) kd[(t * kKv + h) * kDim + 5] *= 8.0f;
    }
    const Device dev = cache.shape().device;
    if (!dev.is_cpu()) k = k.to(dev), v = v.to(dev);
    cache.append(l, k, v, pos);
  }
}

std::string write_calibration() {
  QokvCalibration c;
  c.model = "test_kv_quant_cuda";
  c.n_layers = kLayers, c.n_kv_heads = kKv, c.head_dim = kDim;
  for (int l = 0; l < kLayers; ++l) {
    QokvLayerCalibration lc;
    lc.group_fractions = {0.1, 0.2, 0.3, 0.4};
    for (int h = 0; h < kKv; ++h) {
      std::vector<float> ks(kDim, 1.0f), vs(kDim, 1.0f);
      ks[4] = ks[5] = 4.0f + static_cast<float>(l + h);  // a RoPE pair with the outlier
      for (int i = 0; i < kDim; i += 9) vs[i] = 2.0f;
      lc.k_scale.push_back(ks);
      lc.v_scale.push_back(vs);
    }
    c.layers.push_back(lc);
  }
  static const tandem::fixtures::TempDir dir("kvq-cuda");  // this process's own, removed at exit
  const std::string path = dir.file("calib.json");
  save_qokv_calibration(c, path);
  return path;
}

void expect_same_caches(const KvCache& cpu, const KvCache& gpu, const std::string& what) {
  ASSERT_EQ(cpu.bytes(), gpu.bytes()) << what;
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kKv; ++h) {
      const auto &a = cpu.blocks(l, h), &b = gpu.blocks(l, h);
      ASSERT_EQ(a.size(), b.size()) << what;
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].kq, b[i].kq) << what;
        ASSERT_EQ(a[i].positions, b[i].positions) << what;
        EXPECT_EQ(b[i].k.device(), kGpu) << what;
        std::vector<float> k1, v1, k2, v2;
        kv_block_rows(cpu, l, h, a[i], k1, v1);
        kv_block_rows(gpu, l, h, b[i], k2, v2);
        EXPECT_EQ(k1, k2) << what << " layer " << l << " head " << h << " block " << i;
        EXPECT_EQ(v1, v2) << what << " layer " << l << " head " << h << " block " << i;
      }
    }
  }
}

TEST(KvQuantCuda, PoliciesOnAGpuCacheMatchTheCpuCache) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  const std::string calib = write_calibration();
  struct Case {
    const char* name;
    bool calibrated;
  };
  for (const Case& c : {Case{"int4", false}, Case{"q4_0", false}, Case{"kivi2", false},
                        Case{"qokv", false}, Case{"qokv", true}}) {
    const std::string what = cat(c.name, c.calibrated ? " (calibrated)" : "");
    SCOPED_TRACE(what);
    KvPolicyOptions opt;
    if (c.calibrated) opt.calibration_path = calib;
    auto pc = make_kv_policy(c.name, opt, policy_shape(Device::cpu()));
    auto pg = make_kv_policy(c.name, opt, policy_shape(kGpu));
    KvCache cpu(policy_shape(Device::cpu()), pc), gpu(policy_shape(kGpu), pg);
    append_tokens(cpu, 0, kPrompt);
    append_tokens(gpu, 0, kPrompt);
    if (pc->query_window() > 0) {  // the model hands the window's queries over on the host
      const int w = std::min(pc->query_window(), kPrompt);
      const Tensor qw = host_tensor({w, kHeads, kDim}, 606);
      std::vector<int32_t> wpos(static_cast<size_t>(w));
      std::iota(wpos.begin(), wpos.end(), kPrompt - w);
      for (int l = 0; l < kLayers; ++l) {
        pc->observe_queries(cpu, l, qw, wpos, true);
        pg->observe_queries(gpu, l, qw, wpos, true);
      }
    }
    pc->on_prefill_done(cpu);
    pg->on_prefill_done(gpu);
    ASSERT_TRUE(gpu.has_quantized(0));
    if (c.calibrated) ASSERT_NE(gpu.channel_scales(0, 0), nullptr);
    expect_same_caches(cpu, gpu, what + " after prefill");
    std::vector<int32_t> qpos = {kPrompt - 1, kPrompt - 40, kPrompt + 2};
    const Tensor q = host_tensor({3, kHeads, kDim}, 707);
    for (int l = 0; l < kLayers; ++l) {
      expect_close(attend(cpu, l, q, qpos), attend(gpu, l, q, qpos), what + " prefill");
    }
    // Decode steps: blocks leave the residual and are quantized on both caches.
    for (int step = 0; step < 40; ++step) {
      append_tokens(cpu, kPrompt + step, 1);
      append_tokens(gpu, kPrompt + step, 1);
      pc->on_decode_step(cpu);
      pg->on_decode_step(gpu);
    }
    expect_same_caches(cpu, gpu, what + " after decode");
    qpos = {kPrompt + 39, kPrompt + 20, kPrompt + 39};
    for (int l = 0; l < kLayers; ++l) {
      expect_close(attend(cpu, l, q, qpos), attend(gpu, l, q, qpos), what + " decode");
    }
    // Eviction over quantized blocks: kept slots are re-encoded in their blocks' formats.
    for (int h = 0; h < kKv; ++h) {
      std::vector<int64_t> keep;
      for (int64_t i = h; i < cpu.tokens(1, h); i += 3) keep.push_back(i);
      cpu.retain(1, h, keep);
      gpu.retain(1, h, keep);
    }
    expect_same_caches(cpu, gpu, what + " after retain");
    expect_close(attend(cpu, 1, q, qpos), attend(gpu, 1, q, qpos), what + " retain");
  }
  std::filesystem::remove(calib);
}

// ------------------------------------------------------------------ convert bytes

TEST(KvQuantCuda, ConvertToBlockQuantizedWritesTheCpuBytes) {
  TANDEM_REQUIRE_CUDA_OR_SKIP();
  std::vector<float> x = normal(6 * 96, 12, 2.0f);
  std::fill(x.begin(), x.begin() + 32, 0.0f);        // a zero block (scale 0)
  std::fill(x.begin() + 32, x.begin() + 64, 1.25f);  // a constant block
  x[100] = -7.0f;                                    // a block whose extreme is negative
  const Tensor src = Tensor::from_vector(x, {6, 96}, DType::kF32);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor want = Tensor::empty(src.shape(), t);
    ops::convert(src, want);
    Tensor got_dev = Tensor::empty(src.shape(), t, kGpu);
    ops::convert(src.to(kGpu), got_dev);
    const Tensor got = got_dev.to(Device::cpu());
    ASSERT_EQ(got.nbytes(), want.nbytes());
    const auto* a = static_cast<const uint8_t*>(want.raw_data());
    const auto* b = static_cast<const uint8_t*>(got.raw_data());
    for (int64_t i = 0; i < want.nbytes(); ++i) {
      ASSERT_EQ(static_cast<int>(a[i]), static_cast<int>(b[i]))
          << "byte " << i << " (block " << i / dtype_block_bytes(t) << ", offset "
          << i % dtype_block_bytes(t) << ")";
    }
  }
}

}  // namespace
}  // namespace tandem::llm
