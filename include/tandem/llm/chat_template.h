// SPDX-License-Identifier: Apache-2.0
// ChatTemplate: turns a conversation into the prompt text an instruct model was trained on.
//
// GGUF files carry the template as Jinja source (tokenizer.chat_template). tandem has no Jinja
// engine: detect() recognises the three common styles by a marker and renders them natively.
// - chatml (marker "<|im_start|>"; SmolLM2, Qwen): per message
//   "<|im_start|>{role}\n{content}<|im_end|>\n"; generation prompt "<|im_start|>assistant\n".
// - llama2 (marker "[INST]"; Llama-2, Mistral):
//   "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s><s>[INST] {user} [/INST]".
// - llama3 (marker "<|start_header_id|>"): per message
//   "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"; generation prompt
//   "<|start_header_id|>assistant<|end_header_id|>\n\n".
// The text never starts with the BOS token: encode it with Tokenizer::encode(text,
// add_special=true, parse_special=true), which adds BOS as the vocab asks and turns the markers
// into control ids. A chatml template that injects a fixed system prompt when the conversation has
// none (SmolLM2's: "You are a helpful AI assistant named SmolLM, trained by Hugging Face") has it
// extracted as default_system(). An empty template means chatml; an unknown one raises Unsupported
// unless the caller asks for the chatml fallback.
//
//   auto chat = tandem::llm::ChatTemplate::detect(vocab.chat_template);
//   std::string prompt = chat.apply({{"user", "What is 2+2?"}}, /*add_generation_prompt=*/true);
//
// Departures from the Jinja originals: llama2 and llama3 trim message content (as their templates
// do), chatml keeps it verbatim; llama2 allows any order of user/assistant turns (the original
// raises on non-alternating turns). Thread-safety: immutable, freely shared.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"

namespace tandem::llm {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (chatml and llama3 accept any other role too)
  std::string content;
};

enum class ChatStyle { kChatml, kLlama2, kLlama3 };

class TANDEM_API ChatTemplate {
 public:
  explicit ChatTemplate(ChatStyle style = ChatStyle::kChatml, std::string default_system = {});

  // Style from a Jinja template source by its markers (see above).
  static ChatTemplate detect(std::string_view jinja_source, bool fallback_to_chatml = false);
  // "chatml", "llama2", "llama3" (InvalidArgument otherwise).
  static ChatTemplate from_name(std::string_view name);

  // InvalidArgument for an empty role, or a role llama2 cannot express (not system/user/assistant).
  std::string apply(const std::vector<ChatMessage>& messages,
                    bool add_generation_prompt = true) const;

  ChatStyle style() const { return style_; }
  std::string_view name() const;
  const std::string& default_system() const { return default_system_; }

 private:
  ChatStyle style_;
  std::string default_system_;
};

}  // namespace tandem::llm
