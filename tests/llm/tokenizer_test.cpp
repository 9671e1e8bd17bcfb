// SPDX-License-Identifier: Apache-2.0
// Tokenizer tests: hand-checked byte-level BPE and SentencePiece cases on small vocabs built here,
// the pre-tokenizer regexes, special tokens, streaming decode, errors, and exact ids against
// references made by independent implementations (HF tokenizers on the real SmolLM2 vocab,
// sentencepiece on a trained model; scripts/ref/tokenizer_reference.py).
#include "tandem/llm/tokenizer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model_store.h"

namespace tandem::llm {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

std::filesystem::path data_dir() {
  return (std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data";
}

nlohmann::json read_json(const std::string& name) {
  std::ifstream in(data_dir() / name);
  EXPECT_TRUE(in.good()) << "missing test data " << (data_dir() / name);
  return nlohmann::json::parse(in);
}

// GPT-2's byte -> printable stand-in map, written independently of the library for the tests.
std::string stand_in(unsigned char b) {
  static const std::vector<std::string> map = [] {
    std::vector<std::string> m(256);
    int next = 256;
    for (int c = 0; c < 256; ++c) {
      bool printable = (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE;
      int cp = printable ? c : next++;
      std::string s;
      if (cp < 0x80) {
        s.push_back(static_cast<char>(cp));
      } else {
        s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
      m[c] = s;
    }
    return m;
  }();
  return map[b];
}

std::string mapped(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) out += stand_in(b);
  return out;
}

// Byte-level vocab: ids 0..255 are the single bytes (id == byte value).
Vocab byte_vocab(const std::string& pre = "gpt2") {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(stand_in(static_cast<unsigned char>(b)));
  v.types.assign(256, TokenType::kNormal);
  return v;
}

int32_t add_token(Vocab& v, const std::string& piece, TokenType type = TokenType::kNormal) {
  v.tokens.push_back(piece);
  v.types.push_back(type);
  if (!v.scores.empty()) v.scores.push_back(0.0f);
  return static_cast<int32_t>(v.tokens.size() - 1);
}

// Adds merge "left right" (byte strings) and its result token; returns the result's id.
int32_t add_merge(Vocab& v, const std::string& left, const std::string& right) {
  v.merges.push_back(mapped(left) + " " + mapped(right));
  return add_token(v, mapped(left + right));
}

// ---------------------------------------------------------------- byte-level BPE, hand-checked

TEST(BytePairTokenizer, BytesOnlyVocabGivesOneIdPerByte) {
  Tokenizer tok(byte_vocab());
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.model(), TokenizerModel::kBytePairGpt2);
  EXPECT_EQ(tok.encode("Hi \xC3\xA9"), (Ids{'H', 'i', ' ', 0xC3, 0xA9}));
  EXPECT_EQ(tok.encode(""), Ids{});
  EXPECT_EQ(tok.token_to_piece(' '), " ");
  EXPECT_EQ(tok.piece(' '), "\xC4\xA0");  // "Ġ"
  EXPECT_EQ(tok.find_piece("\xC4\xA0"), ' ');
  EXPECT_EQ(tok.find_piece("no such piece"), -1);
}

TEST(BytePairTokenizer, MergesApplyInRankOrder) {
  Vocab v1 = byte_vocab();
  const int32_t bc = add_merge(v1, "b", "c");
  add_merge(v1, "a", "b");
  EXPECT_EQ(Tokenizer(std::move(v1)).encode("abc"), (Ids{'a', bc}));

  Vocab v2 = byte_vocab();
  const int32_t ab = add_merge(v2, "a", "b");
  add_merge(v2, "b", "c");
  EXPECT_EQ(Tokenizer(std::move(v2)).encode("abc"), (Ids{ab, 'c'}));
}

TEST(BytePairTokenizer, MergesBuildWholeWordsAndTiesGoLeftmost) {
  Vocab v = byte_vocab();
  const int32_t ab = add_merge(v, "a", "b");
  const int32_t cd = add_merge(v, "c", "d");
  const int32_t abcd = add_merge(v, "ab", "cd");
  const int32_t aa = add_merge(v, "a", "a");
  const int32_t sp_ab = add_merge(v, " ", "ab");
  Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("abcd"), (Ids{abcd}));
  EXPECT_EQ(tok.encode("abc"), (Ids{ab, 'c'}));
  EXPECT_EQ(tok.encode("aaa"), (Ids{aa, 'a'}));
  EXPECT_EQ(tok.encode("aaaa"), (Ids{aa, aa}));
  EXPECT_EQ(tok.encode("abcd ab cd"), (Ids{abcd, sp_ab, ' ', cd}));
  EXPECT_EQ(tok.decode({abcd, sp_ab, ' ', cd}), "abcd ab cd");
  // A merge never crosses a pre-tokenizer boundary: "ab" + " " is not merged, nor "!" + "ab".
  EXPECT_EQ(tok.encode("!ab"), (Ids{'!', ab}));
}

TEST(BytePairTokenizer, MergesWithUnknownPiecesAreIgnored) {
  Vocab v = byte_vocab();
  v.merges.push_back("x y");  // result "xy" is not a token
  const int32_t ab = add_merge(v, "a", "b");
  Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("xyab"), (Ids{'x', 'y', ab}));
}

TEST(BytePairTokenizer, Gpt2PreTokenizer) {
  Tokenizer tok(byte_vocab("gpt2"));
  EXPECT_EQ(tok.pre_tokenize("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(tok.pre_tokenize("I'm here, they'll"),
            (Words{"I", "'m", " here", ",", " they", "'ll"}));
  EXPECT_EQ(tok.pre_tokenize("'S 're"), (Words{"'", "S", " '", "re"}));
  EXPECT_EQ(tok.pre_tokenize("  hi  "), (Words{" ", " hi", "  "}));
  EXPECT_EQ(tok.pre_tokenize("a 1234 b2"), (Words{"a", " 1234", " b", "2"}));
  EXPECT_EQ(tok.pre_tokenize("x!!  y"), (Words{"x", "!!", " ", " y"}));
  EXPECT_EQ(tok.pre_tokenize("\t\tx\n"), (Words{"\t", "\t", "x", "\n"}));
  EXPECT_EQ(tok.pre_tokenize("caf\xC3\xA9 \xE4\xB8\x96\xE7\x95\x8C"),
            (Words{"caf\xC3\xA9", " \xE4\xB8\x96\xE7\x95\x8C"}));
  // U+00A0 (no-break space) is whitespace; U+0661 (Arabic-Indic one) is a number.
  EXPECT_EQ(tok.pre_tokenize("a\xC2\xA0\xD9\xA1"), (Words{"a", "\xC2\xA0", "\xD9\xA1"}));
  EXPECT_EQ(tok.pre_tokenize(""), Words{});
}

TEST(BytePairTokenizer, SmolLmPreTokenizerSplitsEveryDigit) {
  Tokenizer tok(byte_vocab("smollm"));
  EXPECT_EQ(tok.pre_tokenize("a 123b"), (Words{"a", " ", "1", "2", "3", "b"}));
  EXPECT_EQ(tok.pre_tokenize("x 42"), (Words{"x", " ", "4", "2"}));
  EXPECT_EQ(tok.pre_tokenize("I've 2"), (Words{"I", "'ve", " ", "2"}));
}

TEST(BytePairTokenizer, Llama3PreTokenizer) {
  Tokenizer tok(byte_vocab("llama-bpe"));
  EXPECT_EQ(tok.pre_tokenize("Hello world"), (Words{"Hello", " world"}));
  EXPECT_EQ(tok.pre_tokenize("1234567"), (Words{"123", "456", "7"}));
  EXPECT_EQ(tok.pre_tokenize("I'M ok"), (Words{"I", "'M", " ok"}));
  EXPECT_EQ(tok.pre_tokenize("!hello"), (Words{"!hello"}));
  EXPECT_EQ(tok.pre_tokenize("a\n\n  b"), (Words{"a", "\n\n", " ", " b"}));
  EXPECT_EQ(tok.pre_tokenize("x?\n\ny"), (Words{"x", "?\n\n", "y"}));
  EXPECT_EQ(tok.pre_tokenize("\tx  "), (Words{"\tx", "  "}));

  Tokenizer qwen(byte_vocab("qwen2"));
  EXPECT_EQ(qwen.pre_tokenize("ab 1234"), (Words{"ab", " ", "1", "2", "3", "4"}));
}

TEST(BytePairTokenizer, Llama3IgnoresMergesForWholeWordTokens) {
  // LLaMA-3 vocabularies take a word that is itself a token as one id, whatever the merges say.
  Vocab v = byte_vocab("llama-bpe");
  const int32_t abc = add_token(v, "abc");
  add_merge(v, "a", "b");
  Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("abc"), (Ids{abc}));
}

TEST(BytePairTokenizer, SpecialTokensMatchWholeLongestFirst) {
  Vocab v = byte_vocab();
  const int32_t start = add_token(v, "<|im_start|>", TokenType::kControl);
  const int32_t end = add_token(v, "<|im_end|>", TokenType::kControl);
  const int32_t end_long = add_token(v, "<|im_end|>!", TokenType::kControl);
  const int32_t user = add_token(v, "<tool>", TokenType::kUserDefined);
  v.eos_id = end;
  Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("<|im_start|>hi<|im_end|>\n"), (Ids{start, 'h', 'i', end, '\n'}));
  EXPECT_EQ(tok.encode("<|im_end|>!x"), (Ids{end_long, 'x'}));
  EXPECT_EQ(tok.encode("<|im_start"), (Ids{'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't'}));
  // Without parse_special control tokens are plain text; user-defined tokens still match.
  Ids plain = tok.encode("<|im_end|><tool>", true, false);
  EXPECT_EQ(plain.size(), 11u);
  EXPECT_EQ(plain.back(), user);
  EXPECT_EQ(tok.decode(plain), "<|im_end|><tool>");
  EXPECT_EQ(tok.decode({start, 'h', end}), "<|im_start|>h<|im_end|>");
  EXPECT_EQ(tok.decode({start, 'h', end}, false), "h");
  EXPECT_EQ(tok.token_to_piece(end, false), "");
  EXPECT_TRUE(tok.is_control(start));
  EXPECT_TRUE(tok.is_eog(end));
  EXPECT_FALSE(tok.is_eog(start));
  EXPECT_FALSE(tok.is_eog('a'));
}

TEST(BytePairTokenizer, AddsBosAndEosWhenTheVocabAsks) {
  Vocab v = byte_vocab();
  v.bos_id = add_token(v, "<s>", TokenType::kControl);
  v.eos_id = add_token(v, "</s>", TokenType::kControl);
  v.add_bos = true;
  v.add_eos = true;
  Tokenizer tok(std::move(v));
  EXPECT_EQ(tok.encode("a"), (Ids{256, 'a', 257}));
  EXPECT_EQ(tok.encode("a", false), (Ids{'a'}));
  EXPECT_EQ(tok.eog_ids(), (Ids{257}));
}

TEST(BytePairTokenizer, BytesWithoutATokenAreDroppedOrUnknown) {
  // Real vocabularies lack some bytes (SmolLM2 has no token for 0x04, 0xC0, 0xF5..0xFF, ...).
  Vocab v = byte_vocab();
  v.tokens[7] = "not a byte";
  v.tokens[0xFF] = "neither";
  Tokenizer dropping(v);
  EXPECT_EQ(dropping.encode("a\x07"
                            "b\xFF"),
            (Ids{'a', 'b'}));
  v.unk_id = add_token(v, "<unk>", TokenType::kUnknown);
  Tokenizer unknown(std::move(v));
  EXPECT_EQ(unknown.encode("a\x07"
                           "b"),
            (Ids{'a', 256, 'b'}));
}

TEST(BytePairTokenizer, RandomByteStringsRoundTrip) {
  Vocab v = byte_vocab("smollm");
  for (const char* w : {"th", "the", " the", "in", "ing", " a", "\xC3\xA9", "er", "  "}) {
    std::string word = w;
    add_merge(v, word.substr(0, word.size() - 1), word.substr(word.size() - 1));
  }
  v.tokens.push_back("<|im_start|>");
  v.types.push_back(TokenType::kControl);
  Tokenizer tok(std::move(v));
  std::mt19937 rng(7);
  const std::string alphabet = "the ing a\xC3\xA9\xE4\xB8\x96 \t\n1<|>'";
  for (int trial = 0; trial < 400; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 48);
    for (int i = 0; i < len; ++i) {
      s.push_back(trial % 2 ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()]);
    }
    EXPECT_EQ(tok.decode(tok.encode(s)), s) << "trial " << trial;
  }
}

TEST(BytePairTokenizer, PreTokenizersCoverRandomBytesExactly) {
  std::mt19937 rng(5);
  const std::string alphabet = "aZ9 \t\r\n'sSlLdD!?.\xC2\xA0\xE4\xB8\x96\xD9\xA1\xF0\x9F\x98\x80";
  for (const char* pre : {"gpt2", "smollm", "llama-bpe", "qwen2"}) {
    Tokenizer tok(byte_vocab(pre));
    for (int trial = 0; trial < 300; ++trial) {
      std::string s(rng() % 40, '\0');
      for (char& ch : s) {
        ch = trial % 2 ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()];
      }
      std::string joined;
      for (const std::string& w : tok.pre_tokenize(s)) {
        EXPECT_FALSE(w.empty()) << pre;
        joined += w;
      }
      EXPECT_EQ(joined, s) << pre << " trial " << trial;
      EXPECT_EQ(tok.decode(tok.encode(s)), s) << pre << " trial " << trial;
    }
  }
}

TEST(BytePairTokenizer, DetokenizerEmitsOnlyCompleteCharacters) {
  Tokenizer tok(byte_vocab());
  const std::string text = "h\xC3\xA9 \xF0\x9F\x98\x80\xE4\xB8\x96!";  // hé 😀世!
  const Ids ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  Detokenizer stream(tok);
  std::vector<std::string> parts;
  for (int32_t id : ids) parts.push_back(stream.push(id));
  parts.push_back(stream.flush());
  const std::vector<std::string> expected = {
      "h", "", "\xC3\xA9", " ", "", "", "", "\xF0\x9F\x98\x80", "", "", "\xE4\xB8\x96", "!", ""};
  EXPECT_EQ(parts, expected);
  // A sequence that can never complete is passed on, and flush() hands back a dangling lead byte.
  EXPECT_EQ(stream.push(0x80), "\x80");
  EXPECT_EQ(stream.push(0xE4), "");
  EXPECT_EQ(stream.push('a'),
            "\xE4"
            "a");
  EXPECT_EQ(stream.push(0xF0), "");
  EXPECT_EQ(stream.flush(), "\xF0");
}

TEST(BytePairTokenizer, BadIdsAndBadVocabsThrow) {
  Tokenizer tok(byte_vocab());
  EXPECT_THROW(tok.decode({1, 256}), InvalidArgument);
  EXPECT_THROW(tok.decode({-1}), InvalidArgument);
  EXPECT_THROW(tok.token_to_piece(1000), InvalidArgument);
  EXPECT_THROW(tok.piece(-5), InvalidArgument);
  EXPECT_THROW(tok.is_eog(256), InvalidArgument);
  Detokenizer stream(tok);
  EXPECT_THROW(stream.push(300), InvalidArgument);

  Vocab bad_model = byte_vocab();
  bad_model.model = "bert";
  EXPECT_THROW(Tokenizer{bad_model}, Unsupported);
  Vocab bad_pre = byte_vocab("no-such-pre");
  EXPECT_THROW(Tokenizer{bad_pre}, Unsupported);
  Vocab bad_types = byte_vocab();
  bad_types.types.pop_back();
  EXPECT_THROW(Tokenizer{bad_types}, InvalidArgument);
  Vocab bad_eos = byte_vocab();
  bad_eos.eos_id = 256;
  EXPECT_THROW(Tokenizer{bad_eos}, InvalidArgument);
  Vocab bad_merge = byte_vocab();
  bad_merge.merges.push_back("ab");
  EXPECT_THROW(Tokenizer{bad_merge}, InvalidArgument);
  Vocab empty;
  empty.model = "gpt2";
  EXPECT_THROW(Tokenizer{empty}, InvalidArgument);
}

// ---------------------------------------------------------------- SentencePiece, hand-checked

constexpr const char* kMeta = "\xE2\x96\x81";  // "▁"

// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then scored pieces.
Vocab spm_vocab(bool with_bytes = true) {
  Vocab v;
  v.model = "llama";
  v.add_space_prefix = true;
  auto add = [&](const std::string& piece, float score, TokenType type) {
    v.tokens.push_back(piece);
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0, TokenType::kUnknown);
  add("<s>", 0, TokenType::kControl);
  add("</s>", 0, TokenType::kControl);
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  if (with_bytes) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      add(name, 0, TokenType::kByte);
    }
  }
  const int base = static_cast<int>(v.tokens.size());
  // base+0 "▁", +1 "a", +2 "b", +3 "c", +4 "ab", +5 "bc", +6 "▁a", +7 "▁ab", +8 "abc"
  add(kMeta, -1.0f, TokenType::kNormal);
  add("a", -2.0f, TokenType::kNormal);
  add("b", -2.0f, TokenType::kNormal);
  add("c", -2.0f, TokenType::kNormal);
  add("ab", -3.0f, TokenType::kNormal);
  add("bc", -2.5f, TokenType::kNormal);
  add(std::string(kMeta) + "a", -4.0f, TokenType::kNormal);
  add(std::string(kMeta) + "ab", -5.0f, TokenType::kNormal);
  add("abc", -6.0f, TokenType::kNormal);
  EXPECT_EQ(base, with_bytes ? 259 : 3);
  return v;
}

TEST(SentencePieceTokenizer, HighestScoreMergesFirst) {
  Tokenizer tok(spm_vocab());
  const int32_t meta = 259, a = 260, b = 261, c = 262, ab = 263, bc = 264, meta_a = 265,
                meta_ab = 266, abc = 267;
  EXPECT_EQ(tok.model(), TokenizerModel::kSentencePiece);
  // "▁abc": pairs ▁a(-4) ab(-3) bc(-2.5): bc first; then ▁a(-4), "abc" needs a+bc: -6 -> ▁a, bc.
  EXPECT_EQ(tok.encode("abc", false), (Ids{meta_a, bc}));
  // "▁ab": ▁a(-4) vs ab(-3): ab, then ▁+ab = ▁ab(-5).
  EXPECT_EQ(tok.encode("ab", false), (Ids{meta_ab}));
  // "▁cab▁a": ▁c none, ca none, ab(-3) first, then ▁a(-4) on the right; c+ab no.
  EXPECT_EQ(tok.encode("cab a", false), (Ids{meta, c, ab, meta_a}));
  EXPECT_EQ(tok.encode("abc", true), (Ids{1, meta_a, bc}));
  EXPECT_EQ(tok.encode("", true), (Ids{1}));
  (void)a;
  (void)b;
  (void)abc;
}

TEST(SentencePieceTokenizer, ByteFallbackAndUnknown) {
  Tokenizer tok(spm_vocab());
  // "é" (C3 A9) and "\n" have no piece: their bytes become <0xC3> <0xA9> <0x0A>.
  EXPECT_EQ(tok.encode("a\xC3\xA9\n", false), (Ids{265, 3 + 0xC3, 3 + 0xA9, 3 + 0x0A}));
  EXPECT_EQ(tok.decode({265, 3 + 0xC3, 3 + 0xA9, 3 + 0x0A}), "a\xC3\xA9\n");
  // Malformed UTF-8 goes through byte fallback byte by byte.
  EXPECT_EQ(tok.encode("\xFF", false), (Ids{259, 3 + 0xFF}));

  Tokenizer no_bytes(spm_vocab(false));
  // Without byte tokens: 3 "▁", 4 "a", ..., 9 "▁a"; "é" and "z" are unknown.
  EXPECT_EQ(no_bytes.encode("a\xC3\xA9z", false), (Ids{9, 0, 0}));
  EXPECT_EQ(no_bytes.decode({9, 0}), "a<unk>");
  EXPECT_EQ(no_bytes.decode({9, 0}, false), "a");
}

TEST(SentencePieceTokenizer, SpacePrefixAndDecode) {
  Tokenizer tok(spm_vocab());
  for (const std::string s : {"ab", " ab", "a  b c", "abc\xE4\xB8\x96 x", "", "   "}) {
    EXPECT_EQ(tok.decode(tok.encode(s)), "<s>" + s) << s;
    EXPECT_EQ(tok.decode(tok.encode(s), false), s) << s;
  }
  Vocab v = spm_vocab();
  v.add_space_prefix = false;
  Tokenizer no_prefix(std::move(v));
  EXPECT_EQ(no_prefix.encode("ab", false), (Ids{263}));
  EXPECT_EQ(no_prefix.decode({259, 263}), " ab");
  // Control tokens in the text, with a space prefix after each (as llama.cpp does).
  EXPECT_EQ(tok.encode("</s>ab", false), (Ids{2, 266}));
  const Ids as_text = tok.encode("</s>ab", false, false);
  ASSERT_GE(as_text.size(), 2u);
  EXPECT_EQ(as_text[0], 259);
  EXPECT_EQ(as_text[1], 3 + '<');
}

TEST(SentencePieceTokenizer, DetokenizerMatchesDecode) {
  Tokenizer tok(spm_vocab());
  const Ids ids = tok.encode("ab \xE4\xB8\x96 abc\xC3\xA9");
  std::string streamed;
  Detokenizer stream(tok);
  for (int32_t id : ids) streamed += stream.push(id);
  streamed += stream.flush();
  EXPECT_EQ(streamed, tok.decode(ids));
  EXPECT_THROW(tok.pre_tokenize("x"), Unsupported);
}

TEST(SentencePieceTokenizer, MatchesSentencePieceReference) {
  const nlohmann::json ref = read_json("tokenizer_spm_reference.json");
  Vocab v;
  v.model = "llama";
  v.add_space_prefix = true;
  v.tokens = ref["tokens"].get<std::vector<std::string>>();
  v.scores = ref["scores"].get<std::vector<float>>();
  for (int t : ref["types"].get<std::vector<int>>()) v.types.push_back(static_cast<TokenType>(t));
  v.bos_id = ref["bos_id"];
  v.eos_id = ref["eos_id"];
  v.unk_id = ref["unk_id"];
  Tokenizer tok(std::move(v));
  ASSERT_GT(ref["cases"].size(), 30u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    const Ids ids = c["ids"].get<Ids>();
    EXPECT_EQ(tok.encode(text, false), ids) << "text: '" << text << "'";
    EXPECT_EQ(tok.decode(ids), c["decoded"].get<std::string>()) << "text: '" << text << "'";
  }
}

// ---------------------------------------------------------------- the real SmolLM2 vocab

class SmolLm2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    try {
      GgufFile file(default_model_path());
      tokenizer_ = std::make_unique<Tokenizer>(load_vocab(file));
    } catch (const Error& e) {
      skip_reason_ = std::string("SmolLM2 GGUF not available: ") + e.what();
    }
  }
  static void TearDownTestSuite() { tokenizer_.reset(); }
  void SetUp() override {
    if (!tokenizer_) GTEST_SKIP() << skip_reason_;
  }
  static std::unique_ptr<Tokenizer> tokenizer_;
  static std::string skip_reason_;
};
std::unique_ptr<Tokenizer> SmolLm2Tokenizer::tokenizer_;
std::string SmolLm2Tokenizer::skip_reason_;

TEST_F(SmolLm2Tokenizer, VocabFacts) {
  const Tokenizer& tok = *tokenizer_;
  EXPECT_EQ(tok.vocab_size(), 49152);
  EXPECT_EQ(tok.vocab().pre, "smollm");
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.find_piece("<|im_start|>"), 1);
  EXPECT_TRUE(tok.is_eog(2));  // <|im_end|>
  EXPECT_TRUE(tok.is_eog(0));  // <|endoftext|>
  EXPECT_FALSE(tok.is_eog(1));
  EXPECT_FALSE(tok.add_bos());
}

TEST_F(SmolLm2Tokenizer, MatchesHuggingFaceTokenizers) {
  const nlohmann::json ref = read_json("tokenizer_smollm2_reference.json");
  ASSERT_EQ(ref["vocab_size"], tokenizer_->vocab_size());
  ASSERT_GT(ref["cases"].size(), 40u);
  for (const auto& c : ref["cases"]) {
    const std::string text = c["text"];
    const Ids ids = c["ids"].get<Ids>();
    EXPECT_EQ(tokenizer_->encode(text, true), ids) << "text: '" << text << "'";
    EXPECT_EQ(tokenizer_->decode(ids), text);
  }
}

TEST_F(SmolLm2Tokenizer, RandomBytesRoundTripAndStream) {
  // The bytes SmolLM2's vocab has a token for (21 of 256 have none and are dropped, as HF
  // tokenizers and llama.cpp do).
  std::string present;
  for (int b = 0; b < 256; ++b) {
    if (tokenizer_->encode(std::string(1, static_cast<char>(b))).size() == 1) {
      present.push_back(static_cast<char>(b));
    }
  }
  EXPECT_EQ(present.size(), 256u - 21u);
  // HF tokenizers (same BPE as the reference file) gives [81, 82] for "a\x04b": 'a', 'b'.
  EXPECT_EQ(tokenizer_->encode("a\x04"
                               "b\xFF"),
            (Ids{81, 82}));
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    std::string s(rng() % 64, '\0');
    for (char& ch : s) {
      ch =
          trial % 3 == 0 ? present[rng() % present.size()] : static_cast<char>(0x20 + rng() % 0x5F);
    }
    const Ids ids = tokenizer_->encode(s);
    ASSERT_EQ(tokenizer_->decode(ids), s) << "trial " << trial;
    Detokenizer stream(*tokenizer_);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    EXPECT_EQ(streamed + stream.flush(), s);
  }
}

TEST_F(SmolLm2Tokenizer, EncodesAMegabyteOfText) {
  static const char* const kWords[] = {
      "the",   "of",   "and",  "to",    "in",   "a",     "is",    "that", "for", "it",
      "as",    "was",  "with", "be",    "by",   "on",    "not",   "he",   "I",   "this",
      "are",   "or",   "his",  "from",  "at",   "which", "but",   "have", "an",  "had",
      "they",  "you",  "were", "their", "one",  "all",   "we",    "can",  "her", "has",
      "there", "been", "if",   "more",  "when", "will",  "would", "who",  "so",  "no"};
  std::mt19937 rng(3);
  std::string text;
  while (text.size() < (1u << 20)) {
    text += kWords[rng() % std::size(kWords)];
    text += (rng() % 12 == 0) ? ".\n" : (rng() % 9 == 0 ? ", " : " ");
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Ids ids = tokenizer_->encode(text);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[ info     ] encoded %zu bytes into %zu tokens in %.3f s (%.1f MB/s)\n", text.size(),
              ids.size(), s, text.size() / s / 1e6);
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_EQ(tokenizer_->decode(ids), text);
}

}  // namespace
}  // namespace tandem::llm
