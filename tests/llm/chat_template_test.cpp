// SPDX-License-Identifier: Apache-2.0
// Chat template tests: hand-checked renderings of the three styles, detection by markers, errors,
// and SmolLM2's real template against jinja2's rendering (tokenizer_smollm2_reference.json).
#include "tandem/llm/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/model_store.h"
#include "tandem/llm/tokenizer.h"

namespace tandem::llm {
namespace {

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", "Hi there "},
    {"assistant", " Hello!"},
    {"user", "Bye"},
};

TEST(ChatTemplate, Chatml) {
  const ChatTemplate chat(ChatStyle::kChatml);
  EXPECT_EQ(chat.name(), "chatml");
  EXPECT_EQ(chat.apply(kConversation),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi there <|im_end|>\n"
            "<|im_start|>assistant\n Hello!<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chat.apply({{"user", "x"}}, false), "<|im_start|>user\nx<|im_end|>\n");
  EXPECT_EQ(chat.apply({}, true), "<|im_start|>assistant\n");
}

TEST(ChatTemplate, ChatmlDefaultSystemOnlyWhenNoneGiven) {
  const ChatTemplate chat(ChatStyle::kChatml, "You help.");
  EXPECT_EQ(chat.apply({{"user", "Q"}}),
            "<|im_start|>system\nYou help.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(chat.apply({{"system", "Mine."}, {"user", "Q"}}, false),
            "<|im_start|>system\nMine.<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n");
}

TEST(ChatTemplate, Llama2) {
  const ChatTemplate chat = ChatTemplate::from_name("llama2");
  EXPECT_EQ(chat.style(), ChatStyle::kLlama2);
  EXPECT_EQ(chat.apply(kConversation),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi there [/INST] Hello! </s>"
            "<s>[INST] Bye [/INST]");
  EXPECT_EQ(chat.apply({{"user", " one "}}), "[INST] one [/INST]");
  EXPECT_THROW(chat.apply({{"user", "a"}, {"system", "late"}}), InvalidArgument);
  EXPECT_THROW(chat.apply({{"tool", "a"}}), InvalidArgument);
}

TEST(ChatTemplate, Llama3) {
  const ChatTemplate chat = ChatTemplate::from_name("llama3");
  EXPECT_EQ(chat.apply(kConversation),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, DetectsStylesByMarkers) {
  EXPECT_EQ(ChatTemplate::detect("").style(), ChatStyle::kChatml);
  EXPECT_EQ(ChatTemplate::detect("{{ '<|im_start|>' + message['role'] + '\\n' }}").style(),
            ChatStyle::kChatml);
  EXPECT_EQ(ChatTemplate::detect("{{ '<|im_start|>' + message['role'] }}").default_system(), "");
  EXPECT_EQ(ChatTemplate::detect("{{ bos_token + '[INST] ' + content + ' [/INST]' }}").style(),
            ChatStyle::kLlama2);
  EXPECT_EQ(
      ChatTemplate::detect("'<|start_header_id|>' + message['role'] + '<|end_header_id|>'").style(),
      ChatStyle::kLlama3);
  const std::string with_system =
      "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nBe kind.<|im_end|>\n' }}"
      "{% endif %}{{'<|im_start|>' + message['role']}}";
  EXPECT_EQ(ChatTemplate::detect(with_system).default_system(), "Be kind.");

  const std::string unknown = "{% for m in messages %}<start_of_turn>{{ m.content }}{% endfor %}";
  EXPECT_THROW(ChatTemplate::detect(unknown), Unsupported);
  try {
    ChatTemplate::detect(unknown);
  } catch (const Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("chatml fallback"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ChatTemplate::detect(unknown, true).style(), ChatStyle::kChatml);
  EXPECT_THROW(ChatTemplate::from_name("zephyr"), InvalidArgument);
  EXPECT_THROW(ChatTemplate().apply({{"", "x"}}), InvalidArgument);
}

TEST(ChatTemplate, SmolLm2MatchesJinjaRendering) {
  std::string path;
  try {
    path = default_model_path();
  } catch (const Error& e) {
    GTEST_SKIP() << "SmolLM2 GGUF not available: " << e.what();
  }
  GgufFile file(path);
  Tokenizer tok(load_vocab(file));
  const ChatTemplate chat = ChatTemplate::detect(tok.vocab().chat_template);
  EXPECT_EQ(chat.style(), ChatStyle::kChatml);
  EXPECT_EQ(chat.default_system(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");

  std::ifstream in((std::filesystem::path(TANDEM_SOURCE_DIR) / "tests/llm") / "data" /
                   "tokenizer_smollm2_reference.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  ASSERT_GE(ref["chats"].size(), 4u);
  for (const auto& c : ref["chats"]) {
    std::vector<ChatMessage> messages;
    for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string text = chat.apply(messages, c["add_generation_prompt"].get<bool>());
    EXPECT_EQ(text, c["text"].get<std::string>());
    EXPECT_EQ(tok.encode(text, true, true), c["ids"].get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace tandem::llm
