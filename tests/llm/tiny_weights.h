// SPDX-License-Identifier: Apache-2.0
// Deterministic weights for tiny test models, bit-identical to scripts/ref/tiny_weights.py: each
// tensor has its own SplitMix64 stream seeded with the FNV-1a 64 hash of its name; element i takes
// the (i+1)-th output z, u = (z >> 40) * 2^-24, value = offset + (2u - 1) * scale in float32. The
// numpy reference scripts build the same models and commit their logits under tests/llm/data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/ops/ops.h"

namespace tandem::llm::testing {

inline uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

inline std::vector<float> tiny_values(const std::string& name, int64_t n, float scale,
                                      float offset = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t state = fnv1a64(name);
  for (int64_t i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = static_cast<float>(z >> 40) * 0x1p-24f;
    const float x = (2.0f * u - 1.0f) * scale;
    v[i] = offset != 0.0f ? offset + x : x;
  }
  return v;
}

// A tensor of those values, converted to `dtype` (f16 rounds to nearest even, as numpy does).
inline Tensor tiny_tensor(const std::string& name, const Shape& shape, float scale,
                          float offset = 0.0f, DType dtype = DType::kF32) {
  Tensor f =
      Tensor::from_vector(tiny_values(name, shape.numel(), scale, offset), shape, DType::kF32);
  if (dtype == DType::kF32) return f;
  Tensor out = Tensor::empty(shape, dtype);
  ops::convert(f, out);
  return out;
}

// The fixed prompt of the reference scripts: (7 i + 3) mod vocab.
inline std::vector<int32_t> tiny_tokens(int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((7 * i + 3) % vocab);
  return t;
}

}  // namespace tandem::llm::testing
