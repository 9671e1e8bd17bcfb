// SPDX-License-Identifier: Apache-2.0
// K-quant weights (GGUF Q4_K, Q6_K): dequantization of random super-blocks against gguf-py's
// (tests/llm/data/kquant_reference.json, made by scripts/ref/kquant_reference.py) through every
// path that reads them (convert, embedding, the fast GEMM for decode and prefill sizes, the
// reference GEMM), GGUF round trip, and a llama model with K-quant weights against its f32 twin.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model.h"
#include "tandem/ops/ops.h"

namespace tandem::llm {
namespace {

using testing::random_kquant;
using testing::TempDir;

struct KQuantCase {
  DType dtype;
  Tensor weight;              // [rows, cols] of the K-quant dtype
  std::vector<float> values;  // gguf-py's dequantization, row-major
};

std::vector<KQuantCase> reference_cases() {
  std::ifstream in((std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data" /
                   "kquant_reference.json");
  if (!in.good()) throw NotFound("missing tests/llm/data/kquant_reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  const int64_t rows = ref.at("rows"), cols = ref.at("cols");
  std::vector<KQuantCase> out;
  for (const auto& [name, dt] :
       {std::pair{"Q4_K", DType::kQ4_K}, std::pair{"Q6_K", DType::kQ6_K}}) {
    const auto& t = ref.at("types").at(name);
    const std::string hex = t.at("hex");
    Tensor w = Tensor::empty({rows, cols}, dt);
    EXPECT_EQ(static_cast<int64_t>(hex.size()), 2 * w.nbytes());
    auto* bytes = static_cast<uint8_t*>(w.raw_data());
    for (size_t i = 0; i + 1 < hex.size(); i += 2) {
      bytes[i / 2] = static_cast<uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16));
    }
    out.push_back({dt, w, t.at("values").get<std::vector<float>>()});
  }
  return out;
}

Tensor random_f32(const Shape& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(s.numel()));
  for (float& x : v) x = nd(rng);
  return Tensor::from_vector(v, s, DType::kF32);
}

TEST(KQuant, DTypeGeometry) {
  EXPECT_EQ(dtype_block_size(DType::kQ4_K), 256);
  EXPECT_EQ(dtype_block_bytes(DType::kQ4_K), 144);
  EXPECT_EQ(dtype_block_bytes(DType::kQ6_K), 210);
  EXPECT_EQ(dtype_row_bytes(DType::kQ6_K, 512), 420);
  EXPECT_EQ(parse_dtype("q4_k"), DType::kQ4_K);
  EXPECT_EQ(dtype_name(DType::kQ6_K), "q6_k");
  EXPECT_EQ(dtype_from_ggml_type(12), DType::kQ4_K);
  EXPECT_EQ(ggml_type_from_dtype(DType::kQ6_K), 14u);
  EXPECT_THROW(dtype_row_bytes(DType::kQ4_K, 100), InvalidArgument);
}

TEST(KQuant, ConvertAndEmbeddingMatchGgufPy) {
  for (const KQuantCase& c : reference_cases()) {
    SCOPED_TRACE(dtype_name(c.dtype));
    Tensor f = Tensor::empty(c.weight.shape(), DType::kF32);
    ops::convert(c.weight, f);
    const auto got = f.to_float_vector();
    ASSERT_EQ(got.size(), c.values.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], c.values[i], 1e-5f * (1.0f + std::abs(c.values[i]))) << "element " << i;
    }
    // Rows looked up by id (row 1, then row 0).
    const int64_t cols = c.weight.size(1);
    Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 0}, {2}, DType::kI32);
    Tensor emb = Tensor::empty({2, cols}, DType::kF32);
    ops::embedding(c.weight, ids, emb);
    const auto e = emb.to_float_vector();
    for (int64_t j = 0; j < cols; ++j) {
      ASSERT_FLOAT_EQ(e[j], c.values[cols + j]) << j;
      ASSERT_FLOAT_EQ(e[cols + j], c.values[j]) << j;
    }
    // Quantizing into a K-quant is refused clearly.
    Tensor back = Tensor::empty(c.weight.shape(), c.dtype);
    EXPECT_THROW(ops::convert(f, back), Unsupported);
  }
}

TEST(KQuant, GemmMatchesDequantizedProduct) {
  for (const KQuantCase& c : reference_cases()) {
    SCOPED_TRACE(dtype_name(c.dtype));
    const int64_t n = c.weight.size(0), k = c.weight.size(1);
    for (int64_t m : {1, 3, 17}) {  // decode, small batch, prefill
      SCOPED_TRACE(m);
      Tensor a = random_f32({m, k}, 100 + m);
      const auto av = a.to_float_vector();
      std::vector<double> want(static_cast<size_t>(m * n), 0.0);
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t l = 0; l < k; ++l)
            want[i * n + j] += double{av[i * k + l]} * c.values[j * k + l];
      Tensor out = Tensor::empty({m, n}, DType::kF32);
      ops::gemm(a, c.weight, out, {.trans_b = true});
      Tensor ref_out = Tensor::empty({m, n}, DType::kF32);
      ops::cpu_reference_kernels().gemm(a, c.weight, ref_out, {.trans_b = true}, nullptr);
      const auto got = out.to_float_vector(), ref = ref_out.to_float_vector();
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-3 * (1.0 + std::abs(want[i]))) << "fast, at " << i;
        EXPECT_NEAR(ref[i], want[i], 1e-4 * (1.0 + std::abs(want[i]))) << "reference, at " << i;
      }
    }
  }
}

TEST(KQuant, GgufRoundTrip) {
  TempDir dir;
  const auto cases = reference_cases();
  GgufWriter w;
  w.add_tensor("q4k", cases[0].weight);
  w.add_tensor("q6k", cases[1].weight);
  w.write(dir.file("k.gguf"));
  GgufFile f(dir.file("k.gguf"));
  EXPECT_EQ(f.find_tensor("q4k")->ggml_type, 12u);
  EXPECT_EQ(f.find_tensor("q6k")->ggml_type, 14u);
  for (size_t i = 0; i < 2; ++i) {
    Tensor t = f.tensor(i == 0 ? "q4k" : "q6k");
    EXPECT_EQ(t.dtype(), cases[i].dtype);
    EXPECT_EQ(t.shape(), cases[i].weight.shape());
    EXPECT_EQ(std::memcmp(t.raw_data(), cases[i].weight.raw_data(), t.nbytes()), 0);
  }
}

// A one-layer llama whose matrices are Q4_K / Q6_K (as in Q4_K_M files) gives the logits of the
// same model with those weights widened to f32.
TEST(KQuant, LlamaWithKQuantWeightsMatchesItsF32Twin) {
  constexpr int64_t d = 256, ff = 512, vocab = 48, heads = 4, kv = 2, hd = d / heads;
  std::mt19937_64 rng(5);
  TempDir dir;
  GgufWriter wk, wf;
  for (GgufWriter* w : {&wk, &wf}) {
    w->set_string("general.architecture", "llama");
    w->set_int("llama.block_count", 1, GgufType::kU32);
    w->set_int("llama.embedding_length", d, GgufType::kU32);
    w->set_int("llama.feed_forward_length", ff, GgufType::kU32);
    w->set_int("llama.attention.head_count", heads, GgufType::kU32);
    w->set_int("llama.attention.head_count_kv", kv, GgufType::kU32);
    w->set_int("llama.context_length", 64, GgufType::kU32);
    w->set_float("llama.attention.layer_norm_rms_epsilon", 1e-5);
  }
  auto add_pair = [&](const std::string& name, const Tensor& t) {
    wk.add_tensor(name, t);
    if (dtype_is_k_quant(t.dtype())) {
      Tensor f = Tensor::empty(t.shape(), DType::kF32);
      ops::convert(t, f);
      wf.add_tensor(name, f);
    } else {
      wf.add_tensor(name, t);
    }
  };
  Tensor ones = Tensor::from_vector(std::vector<float>(d, 1.0f), {d}, DType::kF32);
  add_pair("token_embd.weight", random_kquant({vocab, d}, DType::kQ6_K, rng));
  add_pair("output_norm.weight", ones);
  add_pair("output.weight", random_kquant({vocab, d}, DType::kQ6_K, rng));
  add_pair("blk.0.attn_norm.weight", ones);
  add_pair("blk.0.ffn_norm.weight", ones);
  add_pair("blk.0.attn_q.weight", random_kquant({heads * hd, d}, DType::kQ4_K, rng));
  add_pair("blk.0.attn_k.weight", random_kquant({kv * hd, d}, DType::kQ4_K, rng));
  add_pair("blk.0.attn_v.weight", random_kquant({kv * hd, d}, DType::kQ6_K, rng));
  add_pair("blk.0.attn_output.weight", random_kquant({d, d}, DType::kQ4_K, rng));
  add_pair("blk.0.ffn_gate.weight", random_kquant({ff, d}, DType::kQ4_K, rng));
  add_pair("blk.0.ffn_up.weight", random_kquant({ff, d}, DType::kQ4_K, rng));
  add_pair("blk.0.ffn_down.weight", random_kquant({d, ff}, DType::kQ6_K, rng));
  wk.write(dir.file("k.gguf"));
  wf.write(dir.file("f.gguf"));
  Model mk = Model::load(dir.file("k.gguf")), mf = Model::load(dir.file("f.gguf"));
  EXPECT_EQ(mk.layer(0).w_up.dtype(), DType::kQ4_K);
  EXPECT_LT(mk.weight_bytes() * 5, mf.weight_bytes());
  const std::vector<int32_t> ids = {3, 17, 40, 8, 29, 11, 5}, pos = {0, 1, 2, 3, 4, 5, 6};
  KvCache ck = mk.make_cache(), cf = mf.make_cache();
  const auto lk = mk.forward(ids, pos, ck).to_float_vector();
  const auto lf = mf.forward(ids, pos, cf).to_float_vector();
  float worst = 0.0f, scale = 0.0f;
  for (size_t i = 0; i < lk.size(); ++i) {
    worst = std::max(worst, std::abs(lk[i] - lf[i]));
    scale = std::max(scale, std::abs(lf[i]));
  }
  EXPECT_GT(scale, 0.1f);
  EXPECT_LE(worst, 1e-3f * (1.0f + scale));
  // Decode (M = 1) through the K-quant GEMV too: in f32 (the weights alone differ: none), and with
  // int8 activations (the default; gemv_int8_test checks that kernel exactly against the rounded
  // activations), within the 8-bit rounding of the activations through the layer: measured 0.6%
  // of the largest logit.
  const std::vector<int32_t> next = {21}, npos = {7};
  KvCache ck8 = ck.clone();
  const auto dk = mk.forward(next, npos, ck, {.decode = DecodeArithmetic::kF32}).to_float_vector();
  const auto df = mf.forward(next, npos, cf, {.decode = DecodeArithmetic::kF32}).to_float_vector();
  const auto d8 = mk.forward(next, npos, ck8).to_float_vector();
  float worst8 = 0.0f;
  for (size_t i = 0; i < dk.size(); ++i) {
    EXPECT_NEAR(dk[i], df[i], 1e-3f * (1.0f + scale));
    worst8 = std::max(worst8, std::abs(d8[i] - df[i]));
  }
  EXPECT_LE(worst8, 0.05f * scale);
}

}  // namespace
}  // namespace tandem::llm
