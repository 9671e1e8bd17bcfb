// SPDX-License-Identifier: Apache-2.0
// Synthetic LLaMA files: the presets carry the real models' shapes, a written file loads with the
// configured shape and dtypes and runs, the same (seed, config) writes the same bytes, and
// impossible shapes and unknown presets are refused with clear errors.
#include "tandem/llm/synthetic_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>

#include "llm/gguf_test_util.h"
#include "tandem/core/error.h"
#include "tandem/llm/model.h"

namespace tandem::llm {
namespace {

std::vector<char> read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SyntheticModel, PresetsHaveTheRealShapes) {
  const SyntheticLlamaConfig l7 = synthetic_preset("llama7b");
  EXPECT_EQ(l7.n_layers, 32);
  EXPECT_EQ(l7.d_model, 4096);
  EXPECT_EQ(l7.d_ff, 11008);
  EXPECT_EQ(l7.n_kv_heads, 32);
  const SyntheticLlamaConfig m7 = synthetic_preset("mistral7b");
  EXPECT_EQ(m7.d_ff, 14336);
  EXPECT_EQ(m7.n_kv_heads, 8);
  EXPECT_EQ(synthetic_preset("smollm2-135m").n_heads, 9);
  EXPECT_THROW(synthetic_preset("llama70b"), NotFound);
}

TEST(SyntheticModel, WritesALoadableModelOfTheGivenShape) {
  testing::TempDir dir;
  SyntheticLlamaConfig c = synthetic_preset("smollm2-135m");
  c.n_layers = 2;
  c.d_model = 128;
  c.d_ff = 256;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  const std::string path = dir.file("s.gguf");
  write_synthetic_llama(c, path);
  const Model m = Model::load(path);
  EXPECT_EQ(m.config().n_layers, 2);
  EXPECT_EQ(m.config().d_model, 128);
  EXPECT_EQ(m.config().d_ff, 256);
  EXPECT_EQ(m.config().n_kv_heads, 2);
  EXPECT_EQ(m.config().vocab_size, 300);
  EXPECT_EQ(m.layer(1).w_up.dtype(), DType::kQ4_1);
  EXPECT_EQ(m.layer(1).ffn_norm.dtype(), DType::kF32);
  KvCache cache = m.make_cache();
  const std::vector<int32_t> ids = {1, 2, 3, 299}, pos = {0, 1, 2, 3};
  const Tensor logits = m.forward(ids, pos, cache);
  ASSERT_EQ(logits.shape(), (Shape{4, 300}));
  double sum_sq = 0.0;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    ASSERT_TRUE(std::isfinite(logits.data<float>()[i]));
    sum_sq += double{logits.data<float>()[i]} * logits.data<float>()[i];
  }
  EXPECT_GT(sum_sq, 0.0);  // the noise reaches the logits
  // Deterministic: the same config writes the same file; another seed does not.
  write_synthetic_llama(c, dir.file("t.gguf"));
  EXPECT_EQ(read_all(path), read_all(dir.file("t.gguf")));
  c.seed = 2;
  write_synthetic_llama(c, dir.file("u.gguf"));
  EXPECT_NE(read_all(path), read_all(dir.file("u.gguf")));
}

TEST(SyntheticModel, RefusesImpossibleShapes) {
  testing::TempDir dir;
  SyntheticLlamaConfig c = synthetic_preset("smollm2-135m");
  c.n_layers = 1;
  c.d_model = 100;  // not a multiple of 32 for q4_1 rows
  c.n_heads = 4;
  c.n_kv_heads = 2;
  EXPECT_THROW(write_synthetic_llama(c, dir.file("a.gguf")), InvalidArgument);
  c.d_model = 128;
  c.n_kv_heads = 3;  // does not divide 4 heads
  EXPECT_THROW(write_synthetic_llama(c, dir.file("b.gguf")), InvalidArgument);
}

}  // namespace
}  // namespace tandem::llm
