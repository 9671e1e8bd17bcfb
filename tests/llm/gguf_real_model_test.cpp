// SPDX-License-Identifier: Apache-2.0
// The real SmolLM2-135M-Instruct Q4_1 file (fetched once into the cache by default_model_path; the
// tests skip, saying why, when it cannot be fetched).
//
// Reference values: obtained independently with the Python `gguf` package 0.19.0 (numpy 2.4.6) on
// the same file (sha256 b179c952...db53):
//   r = gguf.GGUFReader(path); r.fields[key].contents() for the metadata below;
//   t = [t for t in r.tensors if t.name == "blk.0.attn_q.weight"][0]
//   d = gguf.quants.dequantize(t.data, t.tensor_type); d[3][:8], d[3].astype(np.float64).sum()
//   likewise token_embd.weight (Q8_0) row 42 and blk.0.attn_norm.weight (F32) t.data[:4].
#include <gtest/gtest.h>

#include <map>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/vocab.h"

namespace tandem::llm {
namespace {

// Path of the real model, or empty with the reason in *why.
std::string real_model(std::string* why) {
  try {
    return default_model_path();
  } catch (const Error& e) {
    *why = e.what();
    return {};
  }
}

#define REQUIRE_REAL_MODEL(path)              \
  std::string why_;                           \
  const std::string path = real_model(&why_); \
  if (path.empty()) GTEST_SKIP() << "SmolLM2 model unavailable: " << why_

TEST(GgufRealModel, MetadataMatchesPythonGguf) {
  REQUIRE_REAL_MODEL(path);
  GgufFile f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.file_size(), 98362432u);
  EXPECT_EQ(f.data_offset(), 1785664u);
  EXPECT_EQ(f.keys().size(), 33u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("general.name"), "Smollm2 135M 8k Lc100K Mix1 Ep2");
  EXPECT_EQ(f.type_of("llama.block_count"), GgufType::kU32);
  EXPECT_EQ(f.get_int("llama.block_count"), 30);
  EXPECT_EQ(f.get_int("llama.embedding_length"), 576);
  EXPECT_EQ(f.get_int("llama.attention.head_count"), 9);
  EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 3);
  EXPECT_EQ(f.get_int("llama.context_length"), 8192);
  EXPECT_EQ(f.get_int("llama.feed_forward_length"), 1536);
  EXPECT_EQ(f.get_int("llama.rope.dimension_count"), 64);
  EXPECT_EQ(f.get_int("llama.vocab_size"), 49152);
  EXPECT_EQ(f.get_int("general.file_type"), 3);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 100000.0);
  EXPECT_EQ(static_cast<float>(f.get_float("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_FALSE(f.has("general.alignment"));
  EXPECT_EQ(f.alignment(), 32u);
}

TEST(GgufRealModel, TensorsMatchPythonGguf) {
  REQUIRE_REAL_MODEL(path);
  GgufFile f(path);
  ASSERT_EQ(f.tensors().size(), 272u);
  std::map<std::string, int> by_type;
  for (const auto& t : f.tensors()) ++by_type[ggml_type_name(t.ggml_type)];
  EXPECT_EQ(by_type["Q4_1"], 210);
  EXPECT_EQ(by_type["F32"], 61);
  EXPECT_EQ(by_type["Q8_0"], 1);

  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->shape, (Shape{49152, 576}));
  EXPECT_EQ(emb->nbytes, 30081024u);
  EXPECT_EQ(emb->offset, 0u);
  const GgufTensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(ggml_type_name(q->ggml_type), "Q4_1");
  EXPECT_EQ(q->shape, (Shape{576, 576}));
  EXPECT_EQ(q->nbytes, 207360u);
  EXPECT_EQ(q->offset + f.data_offset(), 33806656u);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down.weight")->shape, (Shape{576, 1536}));
  EXPECT_EQ(f.find_tensor("blk.29.ffn_gate.weight")->shape, (Shape{1536, 576}));
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied to token_embd

  // Q4_1 row 3 of blk.0.attn_q.weight, dequantized by tandem's Tensor conversion.
  const Tensor wq = f.tensor("blk.0.attn_q.weight");
  EXPECT_EQ(wq.dtype(), DType::kQ4_1);
  const std::vector<float> row = wq.slice(0, 3, 4).to_float_vector();
  ASSERT_EQ(row.size(), 576u);
  const float ref[8] = {-0.06280517578125f, 0.1446533203125f,   0.00634765625f, -0.4085693359375f,
                        0.4212646484375f,   -0.06280517578125f, 0.00634765625f, -0.1319580078125f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(row[i], ref[i]) << i;
  double sum = 0;
  for (float v : row) sum += v;
  EXPECT_NEAR(sum, -3.499053955078125, 1e-9);

  // Q8_0 embedding row 42.
  const std::vector<float> e = f.tensor("token_embd.weight").slice(0, 42, 43).to_float_vector();
  const float eref[4] = {-0.0645904541015625f, -0.03498649597167969f, -0.043060302734375f,
                         -0.0026912689208984375f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(e[i], eref[i]) << i;
  double esum = 0;
  for (float v : e) esum += v;
  EXPECT_NEAR(esum, 2.9141483306884766, 1e-9);

  // F32 norm weights.
  const std::vector<float> n = f.tensor("blk.0.attn_norm.weight").to_float_vector();
  ASSERT_EQ(n.size(), 576u);
  EXPECT_EQ(n[0], 0.01397705078125f);
  EXPECT_EQ(n[1], 0.0238037109375f);
  EXPECT_EQ(n[2], -0.019775390625f);
  EXPECT_EQ(n[3], -0.0302734375f);
}

TEST(GgufRealModel, VocabMatchesPythonGguf) {
  REQUIRE_REAL_MODEL(path);
  GgufFile f(path);
  const Vocab v = load_vocab(f);
  EXPECT_EQ(v.model, "gpt2");
  EXPECT_EQ(v.pre, "smollm");
  ASSERT_EQ(v.tokens.size(), 49152u);
  EXPECT_EQ(v.tokens[0], "<|endoftext|>");
  EXPECT_EQ(v.tokens[1], "<|im_start|>");
  EXPECT_EQ(v.tokens[2], "<|im_end|>");
  EXPECT_EQ(v.tokens[256], "\xC4\xA0\xC4\xA0");  // "ĠĠ"
  EXPECT_EQ(v.tokens[1000], "()");
  EXPECT_EQ(v.tokens[49151], "ectable");
  ASSERT_EQ(v.merges.size(), 48900u);
  EXPECT_EQ(v.merges[0], "\xC4\xA0 t");  // "Ġ t"
  EXPECT_EQ(v.merges[100], "t er");
  EXPECT_EQ(v.merges[48899], "ect able");
  EXPECT_TRUE(v.scores.empty());
  ASSERT_EQ(v.types.size(), 49152u);
  EXPECT_EQ(v.types[0], TokenType::kControl);
  EXPECT_EQ(v.types[16], TokenType::kControl);
  EXPECT_EQ(v.types[17], TokenType::kNormal);
  EXPECT_EQ(v.bos_id, 1);
  EXPECT_EQ(v.eos_id, 2);
  EXPECT_EQ(v.pad_id, 2);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.chat_template.size(), 368u);
  EXPECT_EQ(v.chat_template.rfind("{% for message in messages %}", 0), 0u);
}

}  // namespace
}  // namespace tandem::llm
