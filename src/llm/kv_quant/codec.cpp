// SPDX-License-Identifier: Apache-2.0
// KV codecs: encode / decode of the packed row formats of kv_quant.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/llm/kv_quant.h"

namespace tandem::llm {
namespace {

int64_t code_bytes(int64_t d, int bits) { return (d * bits + 7) / 8; }

void put_f16(uint8_t* p, float x) {
  const uint16_t h = f32_to_f16(x);
  std::memcpy(p, &h, 2);
}
float get_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Packs unsigned codes of `bits` bits (element i at bit i*bits).
void pack_codes(const uint8_t* c, int64_t d, int bits, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(code_bytes(d, bits)));
  for (int64_t i = 0; i < d; ++i) {
    const int64_t bit = i * bits;
    out[bit / 8] |= static_cast<uint8_t>(c[i] << (bit % 8));
  }
}
int unpack_code(const uint8_t* in, int64_t i, int bits) {
  const int64_t bit = i * bits;
  return (in[bit / 8] >> (bit % 8)) & ((1 << bits) - 1);
}

int64_t affine_groups(const KvQuantFormat& f, int64_t d) {
  const int64_t g = f.group == 0 ? d : std::min<int64_t>(f.group, d);
  return (d + g - 1) / g;
}
int64_t affine_row_bytes(const KvQuantFormat& f, int64_t d) {
  return affine_groups(f, d) * 4 + code_bytes(d, f.bits);
}
int64_t block32_row_bytes(const KvQuantFormat& f, int64_t d) {
  return (d + 31) / 32 * (2 + (f.bits == 8 ? 32 : 16));
}
int64_t sym_row_bytes(int bits, int64_t d) { return 2 + code_bytes(d, bits); }

void encode_affine_row(const KvQuantFormat& f, const float* x, int64_t d, uint8_t* out) {
  const int64_t g = f.group == 0 ? d : std::min<int64_t>(f.group, d);
  const int64_t ng = (d + g - 1) / g;
  const int qmax = (1 << f.bits) - 1;
  uint8_t codes[1024];
  std::vector<uint8_t> big;
  uint8_t* c = codes;
  if (d > 1024) {
    big.resize(static_cast<size_t>(d));
    c = big.data();
  }
  for (int64_t j = 0; j < ng; ++j) {
    const int64_t lo = j * g, hi = std::min(d, lo + g);
    float mn = x[lo], mx = x[lo];
    for (int64_t i = lo; i < hi; ++i) mn = std::min(mn, x[i]), mx = std::max(mx, x[i]);
    const float mn16 = f16_to_f32(f32_to_f16(mn));
    const float scale = f16_to_f32(f32_to_f16((mx - mn16) / qmax));
    put_f16(out + j * 4, scale);
    put_f16(out + j * 4 + 2, mn16);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = lo; i < hi; ++i) {
      c[i] = static_cast<uint8_t>(std::clamp<int>(std::lround((x[i] - mn16) * inv), 0, qmax));
    }
  }
  pack_codes(c, d, f.bits, out + ng * 4);
}

void decode_affine_row(const KvQuantFormat& f, const uint8_t* in, int64_t d, float* x) {
  const int64_t g = f.group == 0 ? d : std::min<int64_t>(f.group, d);
  const int64_t ng = (d + g - 1) / g;
  const uint8_t* codes = in + ng * 4;
  for (int64_t j = 0; j < ng; ++j) {
    const float scale = get_f16(in + j * 4), mn = get_f16(in + j * 4 + 2);
    for (int64_t i = j * g; i < std::min(d, (j + 1) * g); ++i) {
      x[i] = mn + scale * static_cast<float>(unpack_code(codes, i, f.bits));
    }
  }
}

void encode_block32_row(const KvQuantFormat& f, const float* x, int64_t d, uint8_t* out) {
  const int64_t nb = (d + 31) / 32;
  const int64_t bb = 2 + (f.bits == 8 ? 32 : 16);
  for (int64_t b = 0; b < nb; ++b) {
    float v[32] = {};
    const int64_t n = std::min<int64_t>(32, d - b * 32);
    std::copy(x + b * 32, x + b * 32 + n, v);
    uint8_t* o = out + b * bb;
    if (f.bits == 8) {  // ggml quantize_row_q8_0
      float amax = 0;
      for (float e : v) amax = std::max(amax, std::fabs(e));
      const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
      put_f16(o, s);
      for (int i = 0; i < 32; ++i) {
        o[2 + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[i] * inv)));
      }
    } else {  // ggml quantize_row_q4_0: the signed extreme maps to -8
      float amax = 0, mx = 0;
      for (float e : v) {
        if (std::fabs(e) > amax) amax = std::fabs(e), mx = e;
      }
      const float s = mx / -8.0f, inv = s != 0 ? 1.0f / s : 0.0f;
      put_f16(o, s);
      for (int i = 0; i < 16; ++i) {
        const int q0 = std::min(15, static_cast<int>(v[i] * inv + 8.5f));
        const int q1 = std::min(15, static_cast<int>(v[i + 16] * inv + 8.5f));
        o[2 + i] = static_cast<uint8_t>(std::max(q0, 0) | (std::max(q1, 0) << 4));
      }
    }
  }
}

void decode_block32_row(const KvQuantFormat& f, const uint8_t* in, int64_t d, float* x) {
  const int64_t nb = (d + 31) / 32;
  const int64_t bb = 2 + (f.bits == 8 ? 32 : 16);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* o = in + b * bb;
    const float s = get_f16(o);
    const int64_t n = std::min<int64_t>(32, d - b * 32);
    for (int64_t i = 0; i < n; ++i) {
      float q;
      if (f.bits == 8) {
        q = static_cast<float>(static_cast<int8_t>(o[2 + i]));
      } else {
        q = static_cast<float>((i < 16 ? (o[2 + i] & 15) : (o[2 + i - 16] >> 4)) - 8);
      }
      x[b * 32 + i] = s * q;
    }
  }
}

void encode_sym_row(int bits, const float* x, int64_t d, uint8_t* out) {
  float amax = 0;
  for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs(x[i]));
  const int qmax = bits == 8 ? 127 : 7;
  const float s = f16_to_f32(f32_to_f16(amax / qmax));
  put_f16(out, s);
  const float inv = s > 0 ? 1.0f / s : 0.0f;
  uint8_t* c = out + 2;
  if (bits == 8) {
    for (int64_t i = 0; i < d; ++i) {
      c[i] = static_cast<uint8_t>(
          static_cast<int8_t>(std::clamp<long>(std::lround(x[i] * inv), -qmax, qmax)));
    }
    return;
  }
  std::memset(c, 0, static_cast<size_t>(code_bytes(d, 4)));
  for (int64_t i = 0; i < d; ++i) {
    const int q = static_cast<int>(std::clamp<long>(std::lround(x[i] * inv), -qmax, qmax)) + 8;
    c[i / 2] |= static_cast<uint8_t>(q << ((i & 1) * 4));
  }
}

void decode_sym_row(int bits, const uint8_t* in, int64_t d, float* x) {
  const float s = get_f16(in);
  const uint8_t* c = in + 2;
  for (int64_t i = 0; i < d; ++i) {
    const int q = bits == 8 ? static_cast<int8_t>(c[i]) : ((c[i / 2] >> ((i & 1) * 4)) & 15) - 8;
    x[i] = s * static_cast<float>(q);
  }
}

}  // namespace

void kv_check_format(const KvQuantFormat& f, const char* what) {
  auto bad = [&](const char* why) {
    throw InvalidArgument(cat(what, ": KV format ", kv_format_name(f), ": ", why));
  };
  switch (f.codec) {
    case KvCodec::kPlain:
      return;
    case KvCodec::kAffine:
      if (f.bits != 2 && f.bits != 4 && f.bits != 8) bad("affine codes are 2, 4 or 8 bits");
      return;
    case KvCodec::kBlock32:
      if (f.bits != 4 && f.bits != 8) bad("block32 (q4_0/q8_0) codes are 4 or 8 bits");
      return;
    case KvCodec::kSymmetric:
      if (f.bits != 4 && f.bits != 8) bad("symmetric codes are 4 or 8 bits");
      return;
    case KvCodec::kChannel:
      if (f.bits != 2 && f.bits != 4 && f.bits != 8) bad("per-channel codes are 2, 4 or 8 bits");
      return;
  }
  bad("unknown codec");
}

std::string kv_format_name(const KvQuantFormat& f) {
  const std::string b = std::to_string(f.bits);
  switch (f.codec) {
    case KvCodec::kPlain:
      return "plain";
    case KvCodec::kAffine:
      return "affine" + b + "/g" + std::to_string(f.group);
    case KvCodec::kBlock32:
      return "q" + b + "_0";
    case KvCodec::kSymmetric:
      return f.mixed ? "sym8/4" : "sym" + b;
    case KvCodec::kChannel:
      return "chan" + b;
  }
  return "codec" + std::to_string(static_cast<int>(f.codec));
}

int64_t kv_encoded_bytes(const KvQuantFormat& f, int64_t n, int64_t d,
                         std::span<const uint8_t> wide) {
  kv_check_format(f, "kv_encoded_bytes");
  switch (f.codec) {
    case KvCodec::kPlain:
      throw InvalidArgument("kv_encoded_bytes: plain rows are not encoded");
    case KvCodec::kAffine:
      return n * affine_row_bytes(f, d);
    case KvCodec::kBlock32:
      return n * block32_row_bytes(f, d);
    case KvCodec::kSymmetric: {
      if (!f.mixed) return n * sym_row_bytes(f.bits, d);
      if (static_cast<int64_t>(wide.size()) != n) {
        throw InvalidArgument(
            cat("kv_encoded_bytes: mixed rows need a bitmap of ", n, " flags, got ", wide.size()));
      }
      int64_t bytes = (n + 7) / 8;
      for (int64_t s = 0; s < n; ++s) bytes += sym_row_bytes(wide[s] ? 8 : 4, d);
      return bytes;
    }
    case KvCodec::kChannel:
      return d * 4 + n * code_bytes(d, f.bits);
  }
  return 0;
}

void kv_encode(const KvQuantFormat& f, const float* x, int64_t n, int64_t d,
               std::span<const uint8_t> wide, uint8_t* out) {
  (void)kv_encoded_bytes(f, n, d, wide);  // validates
  switch (f.codec) {
    case KvCodec::kPlain:
      return;
    case KvCodec::kAffine:
      for (int64_t s = 0; s < n; ++s) {
        encode_affine_row(f, x + s * d, d, out + s * affine_row_bytes(f, d));
      }
      return;
    case KvCodec::kBlock32:
      for (int64_t s = 0; s < n; ++s) {
        encode_block32_row(f, x + s * d, d, out + s * block32_row_bytes(f, d));
      }
      return;
    case KvCodec::kSymmetric: {
      if (!f.mixed) {
        for (int64_t s = 0; s < n; ++s) {
          encode_sym_row(f.bits, x + s * d, d, out + s * sym_row_bytes(f.bits, d));
        }
        return;
      }
      const int64_t map = (n + 7) / 8;
      std::memset(out, 0, static_cast<size_t>(map));
      uint8_t* row = out + map;
      for (int64_t s = 0; s < n; ++s) {
        const int bits = wide[s] ? 8 : 4;
        if (wide[s]) out[s / 8] |= static_cast<uint8_t>(1u << (s % 8));
        encode_sym_row(bits, x + s * d, d, row);
        row += sym_row_bytes(bits, d);
      }
      return;
    }
    case KvCodec::kChannel: {
      const int qmax = (1 << f.bits) - 1;
      std::vector<float> inv(static_cast<size_t>(d)), mns(static_cast<size_t>(d));
      for (int64_t c = 0; c < d; ++c) {
        float mn = n > 0 ? x[c] : 0.0f, mx = mn;
        for (int64_t s = 0; s < n; ++s)
          mn = std::min(mn, x[s * d + c]), mx = std::max(mx, x[s * d + c]);
        const float mn16 = f16_to_f32(f32_to_f16(mn));
        const float scale = f16_to_f32(f32_to_f16((mx - mn16) / qmax));
        put_f16(out + c * 4, scale);
        put_f16(out + c * 4 + 2, mn16);
        inv[c] = scale > 0 ? 1.0f / scale : 0.0f;
        mns[c] = mn16;
      }
      std::vector<uint8_t> codes(static_cast<size_t>(d));
      for (int64_t s = 0; s < n; ++s) {
        for (int64_t c = 0; c < d; ++c) {
          codes[c] = static_cast<uint8_t>(
              std::clamp<long>(std::lround((x[s * d + c] - mns[c]) * inv[c]), 0, qmax));
        }
        pack_codes(codes.data(), d, f.bits, out + d * 4 + s * code_bytes(d, f.bits));
      }
      return;
    }
  }
}

void kv_decode(const KvQuantFormat& f, const uint8_t* in, int64_t n, int64_t d, float* x) {
  kv_check_format(f, "kv_decode");
  switch (f.codec) {
    case KvCodec::kPlain:
      throw InvalidArgument("kv_decode: plain rows are not encoded");
    case KvCodec::kAffine:
      for (int64_t s = 0; s < n; ++s) {
        decode_affine_row(f, in + s * affine_row_bytes(f, d), d, x + s * d);
      }
      return;
    case KvCodec::kBlock32:
      for (int64_t s = 0; s < n; ++s) {
        decode_block32_row(f, in + s * block32_row_bytes(f, d), d, x + s * d);
      }
      return;
    case KvCodec::kSymmetric: {
      if (!f.mixed) {
        for (int64_t s = 0; s < n; ++s) {
          decode_sym_row(f.bits, in + s * sym_row_bytes(f.bits, d), d, x + s * d);
        }
        return;
      }
      const uint8_t* row = in + (n + 7) / 8;
      for (int64_t s = 0; s < n; ++s) {
        const int bits = ((in[s / 8] >> (s % 8)) & 1) ? 8 : 4;
        decode_sym_row(bits, row, d, x + s * d);
        row += sym_row_bytes(bits, d);
      }
      return;
    }
    case KvCodec::kChannel:
      for (int64_t s = 0; s < n; ++s) {
        const uint8_t* codes = in + d * 4 + s * code_bytes(d, f.bits);
        for (int64_t c = 0; c < d; ++c) {
          x[s * d + c] = get_f16(in + c * 4 + 2) +
                         get_f16(in + c * 4) * static_cast<float>(unpack_code(codes, c, f.bits));
        }
      }
      return;
  }
}

}  // namespace tandem::llm
