// SPDX-License-Identifier: Apache-2.0
// QoKV's decode rule (reconstruction): a block leaving the full-precision residual keeps 8-bit
// keys exactly for its most-attended slots (attention accumulated from the decode queries), with
// the bytes of the mixed format; decode_ratio 0 / 1 bound it; the value format settings; the
// attention totals behind the importance; bad settings give clear errors; the calibration's
// value quantizer (value_group) round trips, drives the value format and the V scale search, and
// a bad one is refused with the field named.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "common/temp_dir.h"
#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_policy_registry.h"
#include "tandem/llm/kv_quant.h"
#include "tandem/llm/model.h"

namespace tandem::llm {
namespace {

constexpr int kHeads = 6, kKv = 2, kDim = 64, kBlock = 32, kPrompt = 64;

std::vector<float> gaussian(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

KvCacheShape shape() {
  KvCacheShape s;
  s.n_layers = 2;
  s.n_kv_heads = kKv;
  s.head_dim = kDim;
  s.block_tokens = kBlock;
  return s;
}

bool wide_slot(const KvBlock& b, int s) {
  const auto* map = static_cast<const uint8_t*>(b.k.raw_data());
  return (map[s / 8] >> (s % 8)) & 1;
}

// Drives a qokv policy through a prefill of kPrompt random tokens and `steps` decode tokens
// (one per step, as generate() does). Decode token p's K/V are random; its query heads of KV head
// h point at the key of position needles[h][p % 3] (a token of the block [64, 96)) once that
// token exists, so the three needles of each head are the most attended tokens of their block.
class QokvDecodeDriver {
 public:
  explicit QokvDecodeDriver(const KvPolicyOptions& opt)
      : policy_(make_kv_policy("qokv", opt, shape())), cache_(shape(), policy_) {
    std::vector<int32_t> pos(kPrompt);
    std::iota(pos.begin(), pos.end(), 0);
    for (int l = 0; l < 2; ++l) {
      const auto k = gaussian(size_t{kPrompt} * kKv * kDim, 100 + l);
      const auto v = gaussian(size_t{kPrompt} * kKv * kDim, 200 + l);
      cache_.append(l, Tensor::from_vector(k, {kPrompt, kKv, kDim}, DType::kF32),
                    Tensor::from_vector(v, {kPrompt, kKv, kDim}, DType::kF32), pos);
      const Tensor q = Tensor::from_vector(gaussian(size_t{kHeads} * kDim, 300 + l, 0.3f),
                                           {1, kHeads, kDim}, DType::kF32);
      const int32_t last = kPrompt - 1;
      policy_->observe_queries(cache_, l, q, std::span<const int32_t>(&last, 1), true);
    }
    policy_->on_prefill_done(cache_);
  }

  void decode(int steps) {
    for (int t = 0; t < steps; ++t, ++next_) {
      for (int l = 0; l < 2; ++l) {
        const auto k = gaussian(size_t{kKv} * kDim, 1000 + next_ * 4 + l);
        const auto v = gaussian(size_t{kKv} * kDim, 5000 + next_ * 4 + l);
        keys_[l].push_back(k);
        cache_.append(l, Tensor::from_vector(k, {1, kKv, kDim}, DType::kF32),
                      Tensor::from_vector(v, {1, kKv, kDim}, DType::kF32),
                      std::span<const int32_t>(&next_, 1));
        std::vector<float> q = gaussian(size_t{kHeads} * kDim, 9000 + next_ * 4 + l, 0.1f);
        for (int h = 0; h < kKv; ++h) {
          const int32_t needle = kNeedles[h][next_ % 3];
          if (needle > next_) continue;
          const std::vector<float>& key = keys_[l][needle - kPrompt];
          for (int g = 0; g < kHeads / kKv; ++g) {
            for (int i = 0; i < kDim; ++i) {
              q[(h * (kHeads / kKv) + g) * kDim + i] += 0.5f * key[h * kDim + i];
            }
          }
        }
        policy_->observe_queries(cache_, l, Tensor::from_vector(q, {1, kHeads, kDim}, DType::kF32),
                                 std::span<const int32_t>(&next_, 1), false);
      }
      policy_->on_decode_step(cache_);
    }
  }

  KvCache& cache() { return cache_; }
  // Decoded token p's key row of KV head h in layer l.
  const float* key(int l, int h, int32_t p) const {
    return keys_[l][p - kPrompt].data() + h * kDim;
  }

  static constexpr int32_t kNeedles[kKv][3] = {{70, 81, 90}, {64, 75, 95}};

 private:
  std::shared_ptr<KvPolicy> policy_;
  KvCache cache_;
  int32_t next_ = kPrompt;
  std::vector<std::vector<float>> keys_[2];
};

// Bytes of a mixed symmetric K row block: bitmap + per row an f16 scale and 8- or 4-bit codes.
int64_t mixed_key_bytes(int wide, int n) {
  return (n + 7) / 8 + wide * (2 + kDim) + (n - wide) * (2 + kDim / 2);
}

TEST(QokvDecodeRule, ABlockLeavingTheResidualKeepsEightBitKeysForItsMostAttendedSlots) {
  QokvDecodeDriver drv(KvPolicyOptions{});  // ratio 0.1, residual 32
  // Block [64, 96) leaves the residual once 32 newer tokens exist: after token 127.
  drv.decode(63);
  ASSERT_FALSE(drv.cache().blocks(0, 0)[2].quantized());
  // The residual is held in f16 blocks, which append() fills in place (spec 2.3: fp16 residual).
  EXPECT_EQ(drv.cache().blocks(0, 0)[2].dtype, DType::kF16);
  EXPECT_EQ(drv.cache().blocks(0, 0)[3].dtype, DType::kF16);
  EXPECT_EQ(drv.cache().blocks(0, 0)[3].used, 31);
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  const int64_t cache_before = drv.cache().bytes();
  drv.decode(1);
  for (int l = 0; l < 2; ++l) {
    for (int h = 0; h < kKv; ++h) {
      SCOPED_TRACE(testing::Message() << "layer " << l << " head " << h);
      const auto& blocks = drv.cache().blocks(l, h);
      ASSERT_EQ(blocks.size(), 4u);  // 2 prompt blocks, the decoded block, the residual
      const KvBlock& b = blocks[2];
      ASSERT_TRUE(b.quantized());
      EXPECT_EQ(b.kq, (KvQuantFormat{KvCodec::kSymmetric, 8, 0, true}));
      EXPECT_EQ(b.vq, (KvQuantFormat{KvCodec::kAffine, 4, 64, false}));  // the default vgroup
      EXPECT_FALSE(blocks[3].quantized());
      // round(0.1 * 32) = 3 wide slots: exactly the three needles.
      int wide = 0;
      for (int s = 0; s < b.used; ++s) {
        const int32_t p = b.positions[s];
        const bool needle = p == QokvDecodeDriver::kNeedles[h][0] ||
                            p == QokvDecodeDriver::kNeedles[h][1] ||
                            p == QokvDecodeDriver::kNeedles[h][2];
        EXPECT_EQ(wide_slot(b, s), needle) << "position " << p;
        wide += wide_slot(b, s);
      }
      EXPECT_EQ(wide, 3);
      // Bits accounting: the block's K holds the bitmap, 3 8-bit and 29 4-bit rows.
      EXPECT_EQ(b.k.numel(), mixed_key_bytes(3, kBlock));
      EXPECT_EQ(b.v.numel(), kBlock * (4 + kDim / 2));  // [scale, min] + codes
      // The wide rows decode with 8-bit precision (error < 1/100 of the row's max), the others
      // 4-bit.
      std::vector<float> k, v;
      kv_block_rows(drv.cache(), l, h, b, k, v);
      for (int s = 0; s < b.used; ++s) {
        const float* ref = drv.key(l, h, b.positions[s]);
        float amax = 0, err = 0;
        for (int i = 0; i < kDim; ++i) {
          amax = std::max(amax, std::fabs(ref[i]));
          err = std::max(err, std::fabs(k[s * kDim + i] - ref[i]));
        }
        // Half a code step, plus the f16 rounding of the residual (2^-11 relative).
        EXPECT_LE(err, amax / (wide_slot(b, s) ? 254.0f : 14.0f) * 1.01f + amax / 1024.0f);
      }
    }
  }
  // The f16 block's bytes were freed for real, codes charged instead.
  const int64_t f16_block = 2 * int64_t{kBlock} * kDim * 2;  // the residual is f16
  const int64_t codes = mixed_key_bytes(3, kBlock) + kBlock * (4 + kDim / 2);
  EXPECT_EQ(cache_before - drv.cache().bytes(), 2 * kKv * (f16_block - codes));
  EXPECT_EQ(before - memory_stats(Device::cpu()).current_bytes, 2 * kKv * (f16_block - codes));
}

TEST(QokvDecodeRule, DecodeRatioZeroAndOneBoundTheRule) {
  for (const char* r : {"0", "1"}) {
    SCOPED_TRACE(r);
    KvPolicyOptions opt;
    opt.extra["decode_ratio"] = r;
    QokvDecodeDriver drv(opt);
    drv.decode(64);
    const KvBlock& b = drv.cache().blocks(1, 1)[2];
    ASSERT_TRUE(b.quantized());
    const int wide = r[0] == '1' ? kBlock : 0;
    for (int s = 0; s < b.used; ++s) EXPECT_EQ(wide_slot(b, s), wide > 0);
    EXPECT_EQ(b.k.numel(), mixed_key_bytes(wide, kBlock));
    // The prompt keeps its own share (ratio 0.1): round(64 * 0.1 / 10) = 1 per group.
    int prompt_wide = 0;
    for (int i = 0; i < 2; ++i) {
      const KvBlock& p = drv.cache().blocks(1, 1)[i];
      for (int s = 0; s < p.used; ++s) prompt_wide += wide_slot(p, s);
    }
    EXPECT_EQ(prompt_wide, 10);
  }
}

TEST(QokvDecodeRule, AffineValuesUseTheirGroupAndAreReadBack) {
  KvPolicyOptions opt;
  opt.extra["vgroup"] = "32";
  QokvDecodeDriver drv(opt);
  drv.decode(64);
  for (int i = 0; i < 3; ++i) {
    const KvBlock& b = drv.cache().blocks(0, 1)[i];
    ASSERT_TRUE(b.quantized());
    EXPECT_EQ(b.vq, (KvQuantFormat{KvCodec::kAffine, 4, 32, false}));
    EXPECT_EQ(b.v.numel(), b.used * (2 * 4 + kDim / 2));  // 2 groups of [scale, min] + codes
  }
  // Attention over the codes equals attention over their decoded rows.
  const Tensor q =
      Tensor::from_vector(gaussian(size_t{kHeads} * kDim, 77), {1, kHeads, kDim}, DType::kF32);
  const int32_t p = 200;
  Tensor out = Tensor::empty({1, kHeads, kDim}, DType::kF32);
  cache_attention(q, std::span<const int32_t>(&p, 1), drv.cache(), 0, out);
  KvCache plain(shape());
  for (int h = 0; h < kKv; ++h) {
    std::vector<KvBlock> blocks;
    for (const KvBlock& b : drv.cache().blocks(0, h)) {
      std::vector<float> k, v;
      kv_block_rows(drv.cache(), 0, h, b, k, v);
      KvBlock f;
      f.k = Tensor::from_vector(k, {b.used, kDim}, DType::kF32);
      f.v = Tensor::from_vector(v, {b.used, kDim}, DType::kF32);
      f.positions = b.positions;
      f.used = b.used;
      blocks.push_back(std::move(f));
    }
    plain.replace_blocks(0, h, std::move(blocks));
  }
  Tensor ref = Tensor::empty({1, kHeads, kDim}, DType::kF32);
  cache_attention(q, std::span<const int32_t>(&p, 1), plain, 0, ref);
  for (int64_t i = 0; i < out.numel(); ++i) {
    EXPECT_NEAR(out.data<float>()[i], ref.data<float>()[i], 1e-4f);
  }
}

TEST(QokvAttentionTotals, SumsProbabilitiesOverTheQueriesThatSeeEachKey) {
  // One head, d = 2, keys at positions 0..2; query 0 at position 1 sees keys 0, 1; query 1 at
  // position 2 sees all three.
  const std::vector<float> k = {1, 0, 0, 1, 1, 1};
  const std::vector<float> q = {2, 0, 0, 2};
  const std::vector<int32_t> kpos = {0, 1, 2}, qpos = {1, 2};
  std::vector<double> total(3, 0.0);
  std::vector<int64_t> count(3, 0);
  qokv_attention_totals(q.data(), qpos, 1, 0, 1, k.data(), kpos, 2, total, count);
  const double s = 1.0 / std::sqrt(2.0);
  const double e2 = std::exp(2 * s), e0 = 1.0;
  // Query 0 ([2, 0]): scores 2s, 0 over keys 0, 1. Query 1 ([0, 2]): 0, 2s, 2s.
  EXPECT_NEAR(total[0], e2 / (e2 + e0) + e0 / (e0 + 2 * e2), 1e-6);
  EXPECT_NEAR(total[1], e0 / (e2 + e0) + e2 / (e0 + 2 * e2), 1e-6);
  EXPECT_NEAR(total[2], e2 / (e0 + 2 * e2), 1e-6);
  EXPECT_EQ(count, (std::vector<int64_t>{2, 2, 1}));
  const auto a = qokv_importance(q.data(), qpos, 1, 0, 1, k.data(), kpos, 2);
  EXPECT_NEAR(a[2], total[2], 1e-6);
  EXPECT_NEAR(a[0], total[0] / 2, 1e-6);
  std::vector<double> short_total(2);
  EXPECT_THROW(
      qokv_attention_totals(q.data(), qpos, 1, 0, 1, k.data(), kpos, 2, short_total, count),
      InvalidArgument);
}

TEST(QokvDecodeRule, BadSettingsNameTheSetting) {
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"decode_ratio", "1.5"}, {"vbits", "3"}, {"vgroup", "-1"}, {"decode_ratio", "x"}}) {
    KvPolicyOptions opt;
    opt.extra[key] = value;
    try {
      make_kv_policy("qokv", opt, shape());
      ADD_FAILURE() << key << "=" << value << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

QokvCalibration calibration(int value_group) {
  QokvCalibration c;
  c.model = "test";
  c.n_layers = 2;
  c.n_kv_heads = kKv;
  c.head_dim = kDim;
  c.value_group = value_group;
  for (int l = 0; l < 2; ++l) {
    QokvLayerCalibration lc;
    lc.group_fractions = {0.25, 0.75};
    for (int h = 0; h < kKv; ++h) {
      lc.k_scale.emplace_back(kDim, 1.0f + 0.25f * l);
      lc.v_scale.emplace_back(kDim, 2.0f);
    }
    c.layers.push_back(lc);
  }
  return c;
}

// A file in this process's own scratch folder (removed at exit).
std::string temp_path(const char* name) {
  static const tandem::fixtures::TempDir dir("qokv");
  return dir.file(name);
}

TEST(QokvCalibrationValueGroup, RoundTripsAndSetsThePolicysValueFormat) {
  const std::string path = temp_path("vg.json");
  save_qokv_calibration(calibration(32), path);
  const QokvCalibration r = load_qokv_calibration(path);
  EXPECT_EQ(r.value_group, 32);
  EXPECT_EQ(r.layers[1].k_scale[1][3], 1.25f);
  EXPECT_EQ(r.layers[0].group_fractions, (std::vector<double>{0.25, 0.75}));
  KvPolicyOptions opt;
  opt.calibration_path = path;
  {
    QokvDecodeDriver drv(opt);
    drv.decode(64);
    for (int i = 0; i < 3; ++i) {
      const KvBlock& b = drv.cache().blocks(1, 0)[i];
      EXPECT_EQ(b.vq, (KvQuantFormat{KvCodec::kAffine, 4, 32, false}));
      EXPECT_TRUE(b.channel_scaled);
    }
  }
  opt.extra["vgroup"] = "0";  // the setting wins over the calibration
  {
    QokvDecodeDriver drv(opt);
    EXPECT_EQ(drv.cache().blocks(1, 0)[0].vq, (KvQuantFormat{KvCodec::kSymmetric, 4, 0, false}));
  }
  // Files written before value_group existed still load (-1: not recorded).
  save_qokv_calibration(calibration(-1), path);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("value_group"), std::string::npos);
  EXPECT_EQ(load_qokv_calibration(path).value_group, -1);
  std::filesystem::remove(path);
}

TEST(QokvCalibrationValueGroup, BadValueGroupNamesTheField) {
  const std::string head = R"({"format":"tandem-qokv-calibration","version":1,"n_layers":1,)"
                           R"("n_kv_heads":1,"head_dim":2,"value_group":)";
  const std::string tail =
      R"(,"layers":[{"group_fractions":[1],"k_scale":[[1,1]],"v_scale":[[1,1]]}]})";
  EXPECT_EQ(parse_qokv_calibration(head + "64" + tail, "'ok.json'").value_group, 64);
  for (const char* bad : {"-2", "\"64\"", "1.5", "99999"}) {
    try {
      parse_qokv_calibration(head + bad + tail, "'bad.json'");
      ADD_FAILURE() << "value_group " << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("'bad.json'"), std::string::npos) << msg;
      EXPECT_NE(msg.find("value_group"), std::string::npos) << msg;
    }
  }
}

TEST(QokvCalibrationValueGroup, TheValueSearchScalesAnOutlierChannelForAffineValues) {
  const int n = 128, heads = 3, kv = 1, d = 64;
  QokvSample s;
  s.n = n;
  s.q = gaussian(size_t{n} * heads * d, 1);
  s.k = gaussian(size_t{n} * kv * d, 2);
  s.v = gaussian(size_t{n} * kv * d, 3);
  for (int t = 0; t < n; ++t) s.v[t * d + 9] *= 40.0f;  // an outlier value channel
  const std::vector<QokvSample> samples = {s, s};
  for (int group : {0, 64, 32}) {
    SCOPED_TRACE(group);
    QokvCalibrationOptions o;
    o.value_group = group;
    const QokvLayerCalibration c = calibrate_qokv_layer(samples, heads, kv, d, o);
    EXPECT_GT(c.v_scale[0][9], 4.0f);
    for (int i = 0; i < d; ++i) {
      EXPECT_GE(c.v_scale[0][i], 1.0f);
      if (i != 9) EXPECT_LT(c.v_scale[0][i], c.v_scale[0][9]);
    }
  }
}

}  // namespace
}  // namespace tandem::llm
