// SPDX-License-Identifier: Apache-2.0
// The "sched.mlp" stage kind (mlp_stage.h).
#include "tandem/sched/mlp_stage.h"

#include <cmath>
#include <map>
#include <random>

#include "tandem/core/error.h"
#include "tandem/ops/ops.h"
#include "tandem/sched/stage.h"

namespace tandem::sched {
namespace {

int64_t get_int(const nlohmann::json& c, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!c.contains(key)) {
    if (def < lo) throw InvalidArgument(std::string("sched.mlp: missing \"") + key + "\"");
    return def;
  }
  if (!c[key].is_number_integer() || c[key].get<int64_t>() < lo || c[key].get<int64_t>() > hi)
    throw InvalidArgument(std::string("sched.mlp: \"") + key + "\" must be an integer in [" +
                          std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                          c[key].dump());
  return c[key].get<int64_t>();
}

class MlpStage : public Stage {
 public:
  explicit MlpStage(const nlohmann::json& c) {
    for (const auto& [k, v] : c.items())
      if (k != "kind" && k != "d" && k != "first_layer" && k != "last_layer" && k != "seed" &&
          k != "carry")
        throw InvalidArgument("sched.mlp: unknown config key \"" + k + "\"");
    d_ = get_int(c, "d", -1, 1, 8192);
    first_ = get_int(c, "first_layer", 0, 0, 4096);
    last_ = get_int(c, "last_layer", -1, first_ + 1, 4096);
    if (c.contains("seed") && !c["seed"].is_number_unsigned() &&
        !(c["seed"].is_number_integer() && c["seed"].get<int64_t>() >= 0))
      throw InvalidArgument("sched.mlp: \"seed\" must be a non-negative integer");
    seed_ = c.contains("seed") ? c["seed"].get<uint64_t>() : 1;
    if (c.contains("carry") && !c["carry"].is_boolean())
      throw InvalidArgument("sched.mlp: \"carry\" must be true or false");
    carry_ = c.value("carry", false);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    for (int64_t l = first_; l < last_; ++l) {
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(l));
      std::uniform_real_distribution<float> u(-scale, scale);
      std::vector<float> w(static_cast<size_t>(d_ * d_)), b(static_cast<size_t>(d_));
      for (auto& x : w) x = u(rng);
      for (auto& x : b) x = 0.1f * u(rng);
      weights_.push_back(Tensor::from_vector(w, Shape{d_, d_}, DType::kF32));
      biases_.push_back(Tensor::from_vector(b, Shape{d_}, DType::kF32));
    }
  }

  std::string kind() const override { return "sched.mlp"; }

  Packet process(Packet in) override {
    if (in.tensors.size() != 1 || in.tensors[0].dtype() != DType::kF32 ||
        in.tensors[0].rank() != 2 || in.tensors[0].size(1) != d_)
      throw InvalidArgument("sched.mlp (layers " + std::to_string(first_) + ".." +
                            std::to_string(last_) + "): expected one F32 tensor [T, " +
                            std::to_string(d_) + "], got " +
                            (in.tensors.empty() ? std::string("none") : in.tensors[0].to_string()));
    Tensor x = in.tensors[0].clone();
    const int64_t rows = x.size(0);
    if (carry_) {
      auto it = state_.find(in.request_id);
      const int32_t expected = it == state_.end() ? 0 : it->second.next_micro;
      if (in.micro != expected)
        throw ContractError("sched.mlp: request " + std::to_string(in.request_id) + " sent micro " +
                            std::to_string(in.micro) + " but micro " + std::to_string(expected) +
                            " was expected (out of order, repeated, or not reset)");
      if (it != state_.end()) ops::add(x, it->second.sum, x);
    }
    Tensor y = Tensor::empty(Shape{rows, d_}, DType::kF32);
    for (size_t l = 0; l < weights_.size(); ++l) {
      ops::gemm(x, weights_[l], y);
      ops::add(y, biases_[l], y);
      ops::gelu(y, y);
      std::swap(x, y);
    }
    if (carry_) {
      auto& st = state_[in.request_id];
      if (!st.sum.defined()) st.sum = Tensor::zeros(Shape{d_}, DType::kF32);
      float* s = st.sum.data<float>();
      const float* px = x.data<float>();
      for (int64_t c = 0; c < d_; ++c) {
        float acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += px[r * d_ + c];
        s[c] += rows > 0 ? acc / static_cast<float>(rows) : 0.0f;
      }
      st.next_micro = in.micro + 1;
      if (st.next_micro == in.n_micro) state_.erase(in.request_id);  // the request is complete
    }
    in.tensors[0] = std::move(x);
    return in;
  }

  void reset(uint64_t request_id) override { state_.erase(request_id); }

 private:
  struct State {
    Tensor sum;
    int32_t next_micro = 0;
  };
  int64_t d_ = 0, first_ = 0, last_ = 0;
  uint64_t seed_ = 1;
  bool carry_ = false;
  std::vector<Tensor> weights_, biases_;
  std::map<uint64_t, State> state_;
};

const StageKindRegistration kMlpRegistration("sched.mlp", [](const nlohmann::json& c) {
  return std::make_unique<MlpStage>(c);
});

}  // namespace

Tensor mlp_stage_input(int64_t tokens, int64_t d, uint64_t seed, uint64_t request_id,
                       int32_t micro) {
  if (tokens < 0 || d < 1) throw InvalidArgument("mlp_stage_input: bad shape");
  std::mt19937_64 rng(seed ^ (request_id * 0xBF58476D1CE4E5B9ull) ^
                      (static_cast<uint64_t>(micro) * 0x94D049BB133111EBull));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(tokens * d));
  for (auto& x : v) x = u(rng);
  return Tensor::from_vector(v, Shape{tokens, d}, DType::kF32);
}

}  // namespace tandem::sched
