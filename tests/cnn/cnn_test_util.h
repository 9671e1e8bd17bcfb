// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the tandem::cnn tests: reference files written by scripts/cnn/gen_models.py,
// tensor comparison, random tensors.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::cnn::testing {

// Where committed fixtures live, and where generated models are looked for
// ($TANDEM_CNN_MODELS, default <build>/cnn_models).
inline std::filesystem::path data_dir() { return TANDEM_CNN_TEST_DATA; }
inline std::filesystem::path models_dir() {
  const char* env = std::getenv("TANDEM_CNN_MODELS");
  return env && *env ? std::filesystem::path(env) : std::filesystem::path(TANDEM_CNN_MODELS_DIR);
}

inline std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

// One reference run: the input image and every output, as gen_models.py --reference wrote them.
struct Reference {
  std::filesystem::path model;
  Tensor input;
  std::vector<Tensor> outputs;
  std::string producer;
};

inline Reference load_reference(const std::filesystem::path& dir, const std::string& name) {
  Reference r;
  std::ifstream jf(dir / (name + ".json"));
  const nlohmann::json j = nlohmann::json::parse(jf);
  r.model = dir / j.at("model").get<std::string>();
  r.producer = j.value("reference", "");
  const std::vector<int64_t> in_shape = j.at("input_shape");
  const std::vector<float> x = read_floats(dir / (name + ".input.bin"));
  r.input = Tensor::from_vector(x, Shape(in_shape), DType::kF32);
  const std::vector<float> y = read_floats(dir / (name + ".output.bin"));
  size_t off = 0;
  for (const auto& s : j.at("output_shapes")) {
    const Shape shape(s.get<std::vector<int64_t>>());
    std::vector<float> part(y.begin() + static_cast<long>(off),
                            y.begin() + static_cast<long>(off + shape.numel()));
    off += shape.numel();
    r.outputs.push_back(Tensor::from_vector(part, shape, DType::kF32));
  }
  return r;
}

// max |a - b| / max(1, max |b|): the error relative to the reference's scale.
inline double scaled_max_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.contiguous().to_float_vector(),
                           y = b.contiguous().to_float_vector();
  if (x.size() != y.size()) return INFINITY;
  double err = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return err / scale;
}

// Bitwise equality of two f32 tensors of the same shape (any strides).
inline bool bit_equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape())) return false;
  const std::vector<float> x = a.contiguous().to_float_vector(),
                           y = b.contiguous().to_float_vector();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

inline Tensor random_tensor(const Shape& s, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& e : v) e = d(rng);
  return Tensor::from_vector(v, s, DType::kF32);
}

}  // namespace tandem::cnn::testing
