// SPDX-License-Identifier: Apache-2.0
// KV codecs (kv_quant.h): pack / unpack round trips for every format over odd head dims and row
// counts with per-format error bounds, exact byte sizes, idempotent re-encoding, and bad formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

std::vector<float> random_rows(int64_t n, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * d));
  for (float& v : x) v = nd(rng);
  if (!x.empty()) x[0] = 6.5f;  // an outlier, as keys have
  return x;
}

struct Case {
  KvQuantFormat f;
  const char* name;
};

std::vector<Case> formats() {
  return {
      {{KvCodec::kAffine, 8, 0, false}, "affine8"},
      {{KvCodec::kAffine, 4, 0, false}, "affine4"},
      {{KvCodec::kAffine, 2, 32, false}, "affine2g32"},
      {{KvCodec::kAffine, 4, 32, false}, "affine4g32"},
      {{KvCodec::kBlock32, 8, 0, false}, "q8_0"},
      {{KvCodec::kBlock32, 4, 0, false}, "q4_0"},
      {{KvCodec::kSymmetric, 8, 0, false}, "sym8"},
      {{KvCodec::kSymmetric, 4, 0, false}, "sym4"},
      {{KvCodec::kSymmetric, 8, 0, true}, "sym8/4"},
      {{KvCodec::kChannel, 2, 0, false}, "chan2"},
      {{KvCodec::kChannel, 4, 0, false}, "chan4"},
  };
}

// The largest error the format may make on element (s, i) of x [n, d] (half a quantization step
// of the scale group holding it, the clipping of q4_0's positive side, plus f16 rounding).
float bound(const KvQuantFormat& f, const std::vector<float>& x, int64_t n, int64_t d, int64_t s,
            int64_t i, bool wide) {
  auto range_of = [&](int64_t lo, int64_t hi, bool absmax) {
    float mn = x[s * d + lo], mx = mn, am = 0;
    for (int64_t j = lo; j < hi; ++j) {
      mn = std::min(mn, x[s * d + j]), mx = std::max(mx, x[s * d + j]);
      am = std::max(am, std::fabs(x[s * d + j]));
    }
    return absmax ? am : mx - mn;
  };
  const float eps = 2e-3f;
  switch (f.codec) {
    case KvCodec::kAffine: {
      const int64_t g = f.group == 0 ? d : std::min<int64_t>(f.group, d);
      const int64_t lo = i / g * g, hi = std::min(d, lo + g);
      return range_of(lo, hi, false) / ((1 << f.bits) - 1) * 0.5f * 1.01f +
             eps * range_of(lo, hi, false) + 1e-6f;
    }
    case KvCodec::kBlock32: {
      const int64_t lo = i / 32 * 32, hi = std::min(d, lo + 32);
      const float am = range_of(lo, hi, true);
      return (f.bits == 8 ? am / 127 * 0.5f : am / 8) * 1.01f + eps * am + 1e-6f;
    }
    case KvCodec::kSymmetric: {
      const float am = range_of(0, d, true);
      const int bits = f.mixed ? (wide ? 8 : 4) : f.bits;
      return am / (bits == 8 ? 127 : 7) * 0.5f * 1.01f + eps * am + 1e-6f;
    }
    case KvCodec::kChannel: {
      float mn = x[i], mx = x[i];
      for (int64_t r = 0; r < n; ++r)
        mn = std::min(mn, x[r * d + i]), mx = std::max(mx, x[r * d + i]);
      return (mx - mn) / ((1 << f.bits) - 1) * 0.5f * 1.01f + eps * (mx - mn) + 1e-6f;
    }
    case KvCodec::kPlain:
      break;
  }
  return 0;
}

TEST(KvCodec, RoundTripsEveryFormatWithinHalfAStepOnOddShapes) {
  for (const Case& c : formats()) {
    for (int64_t d : {64, 33, 7, 100}) {
      for (int64_t n : {1, 5, 32}) {
        SCOPED_TRACE(::testing::Message() << c.name << " d=" << d << " n=" << n);
        const std::vector<float> x = random_rows(n, d, static_cast<uint64_t>(d * 131 + n));
        std::vector<uint8_t> wide;
        if (c.f.mixed) {
          for (int64_t s = 0; s < n; ++s) wide.push_back(s % 3 == 0);
        }
        const int64_t bytes = kv_encoded_bytes(c.f, n, d, wide);
        std::vector<uint8_t> buf(static_cast<size_t>(bytes) + 16, 0xAB);  // guard after the end
        kv_encode(c.f, x.data(), n, d, wide, buf.data());
        for (size_t g = static_cast<size_t>(bytes); g < buf.size(); ++g) ASSERT_EQ(buf[g], 0xAB);
        std::vector<float> y(x.size());
        kv_decode(c.f, buf.data(), n, d, y.data());
        for (int64_t s = 0; s < n; ++s) {
          for (int64_t i = 0; i < d; ++i) {
            ASSERT_LE(std::fabs(y[s * d + i] - x[s * d + i]) - 1e-3f * std::fabs(x[s * d + i]),
                      bound(c.f, x, n, d, s, i, c.f.mixed && wide[s]))
                << "row " << s << " channel " << i;
          }
        }
        // Encoding the decoded rows again reproduces the codes (the grid is stable).
        if (c.f.codec == KvCodec::kSymmetric || c.f.codec == KvCodec::kBlock32) {
          std::vector<uint8_t> again(static_cast<size_t>(bytes));
          kv_encode(c.f, y.data(), n, d, wide, again.data());
          EXPECT_TRUE(std::equal(again.begin(), again.end(), buf.begin()));
        }
      }
    }
  }
}

TEST(KvCodec, ByteSizesMatchTheDocumentedLayouts) {
  const int64_t d = 64;
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kAffine, 8, 0, false}, 1, d), 4 + 64);
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kAffine, 4, 0, false}, 1, d), 4 + 32);
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kAffine, 2, 32, false}, 1, d), 8 + 16);
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kBlock32, 8, 0, false}, 1, d), 2 * 34);  // q8_0: 8.5 bits
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kBlock32, 4, 0, false}, 1, d), 2 * 18);  // q4_0: 4.5 bits
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kSymmetric, 4, 0, false}, 3, d), 3 * 34);
  const std::vector<uint8_t> wide = {1, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kSymmetric, 8, 0, true}, 10, d, wide), 2 + 2 * 66 + 8 * 34);
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kChannel, 2, 0, false}, 32, d), 64 * 4 + 32 * 16);
  EXPECT_EQ(kv_encoded_bytes({KvCodec::kAffine, 4, 0, false}, 1, 7), 4 + 4);  // odd d rounds up
}

TEST(KvCodec, RejectsFormatsThatDoNotExist) {
  EXPECT_THROW(kv_encoded_bytes({KvCodec::kAffine, 3, 0, false}, 1, 64), InvalidArgument);
  EXPECT_THROW(kv_encoded_bytes({KvCodec::kBlock32, 2, 0, false}, 1, 64), InvalidArgument);
  EXPECT_THROW(kv_encoded_bytes({KvCodec::kSymmetric, 8, 0, true}, 4, 64, {}), InvalidArgument);
  EXPECT_THROW(kv_encoded_bytes({KvCodec::kPlain, 0, 0, false}, 4, 64), InvalidArgument);
  EXPECT_EQ(kv_format_name({KvCodec::kBlock32, 4, 0, false}), "q4_0");
  EXPECT_EQ(kv_format_name({KvCodec::kSymmetric, 8, 0, true}), "sym8/4");
}

TEST(KvCodec, Q4ZeroMatchesGgmlOnAKnownBlock) {
  // Values 0..31 scaled: the extreme (31) maps to -8 with d = 31 / -8; value j sits in the low
  // nibble of byte j, value j + 16 in the high nibble.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = static_cast<float>(i);
  std::vector<uint8_t> buf(18);
  kv_encode({KvCodec::kBlock32, 4, 0, false}, x.data(), 1, 32, {}, buf.data());
  EXPECT_EQ(buf[2 + 0] & 15, 8);   // 0 -> q = 8
  EXPECT_EQ(buf[2 + 15] >> 4, 0);  // 31 -> q = 0 (-8 * d = 31)
  std::vector<float> y(32);
  kv_decode({KvCodec::kBlock32, 4, 0, false}, buf.data(), 1, 32, y.data());
  EXPECT_NEAR(y[31], 31.0f, 0.02f);
}

}  // namespace
}  // namespace tandem::llm
