// SPDX-License-Identifier: Apache-2.0
// Chat templates: style detection by markers and native rendering (see chat_template.h).
#include "tandem/llm/chat_template.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::llm {
namespace {

constexpr std::string_view kChatmlMarker = "<|im_start|>";
constexpr std::string_view kLlama3Marker = "<|start_header_id|>";
constexpr std::string_view kLlama2Marker = "[INST]";

std::string trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

// A fixed system prompt written literally in a chatml template:
// '<|im_start|>system\n<text><|im_end|>' inside one string literal ("\n" raw or escaped).
std::string literal_chatml_system(std::string_view src) {
  for (std::string_view head : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    const size_t at = src.find(head);
    if (at == std::string_view::npos || at == 0) continue;
    const char quote = src[at - 1];
    if (quote != '\'' && quote != '"') continue;
    const size_t begin = at + head.size();
    const size_t end = src.find("<|im_end|>", begin);
    if (end == std::string_view::npos) continue;
    std::string_view text = src.substr(begin, end - begin);
    if (text.empty() || text.find_first_of("'\"{}\\") != std::string_view::npos) continue;
    return std::string(text);
  }
  return {};
}

}  // namespace

ChatTemplate::ChatTemplate(ChatStyle style, std::string default_system)
    : style_(style), default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::detect(std::string_view src, bool fallback_to_chatml) {
  if (src.empty()) return ChatTemplate(ChatStyle::kChatml);
  if (src.find(kChatmlMarker) != std::string_view::npos) {
    return ChatTemplate(ChatStyle::kChatml, literal_chatml_system(src));
  }
  if (src.find(kLlama3Marker) != std::string_view::npos) return ChatTemplate(ChatStyle::kLlama3);
  if (src.find(kLlama2Marker) != std::string_view::npos) return ChatTemplate(ChatStyle::kLlama2);
  if (fallback_to_chatml) return ChatTemplate(ChatStyle::kChatml);
  throw Unsupported(cat("chat template: unknown style (no '", kChatmlMarker, "', '", kLlama3Marker,
                        "' or '", kLlama2Marker, "' marker in the ", src.size(),
                        "-byte tokenizer.chat_template, which begins '",
                        src.substr(0, std::min<size_t>(src.size(), 60)),
                        "'); ask for the chatml fallback to use chatml anyway"));
}

ChatTemplate ChatTemplate::from_name(std::string_view name) {
  if (name == "chatml") return ChatTemplate(ChatStyle::kChatml);
  if (name == "llama2") return ChatTemplate(ChatStyle::kLlama2);
  if (name == "llama3") return ChatTemplate(ChatStyle::kLlama3);
  throw InvalidArgument(
      cat("chat template: unknown name '", name, "'; known: chatml, llama2, llama3"));
}

std::string_view ChatTemplate::name() const {
  switch (style_) {
    case ChatStyle::kChatml:
      return "chatml";
    case ChatStyle::kLlama2:
      return "llama2";
    case ChatStyle::kLlama3:
      return "llama3";
  }
  return "chatml";
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty()) {
      throw InvalidArgument(cat("chat template: message ", i, " has an empty role"));
    }
  }
  const bool has_system = !messages.empty() && messages[0].role == "system";
  std::string out;

  if (style_ == ChatStyle::kChatml || style_ == ChatStyle::kLlama3) {
    auto add = [&](std::string_view role, std::string_view content) {
      if (style_ == ChatStyle::kChatml) {
        out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
      } else {
        out.append("<|start_header_id|>").append(role).append("<|end_header_id|>\n\n");
        out.append(trim(content)).append("<|eot_id|>");
      }
    };
    if (!has_system && !default_system_.empty()) add("system", default_system_);
    for (const ChatMessage& m : messages) add(m.role, m.content);
    if (add_generation_prompt) {
      out.append(style_ == ChatStyle::kChatml
                     ? "<|im_start|>assistant\n"
                     : "<|start_header_id|>assistant<|end_header_id|>\n\n");
    }
    return out;
  }

  // llama2: the system prompt rides in the first user turn; each answer closes its turn with EOS
  // and the next turn opens with BOS.
  std::string system = has_system ? trim(messages[0].content) : default_system_;
  bool system_pending = !system.empty();
  bool need_bos = false;
  auto user_turn = [&](std::string_view content) {
    if (need_bos) out.append("<s>");
    out.append("[INST] ");
    if (system_pending) {
      out.append("<<SYS>>\n").append(system).append("\n<</SYS>>\n\n");
      system_pending = false;
    }
    out.append(trim(content)).append(" [/INST]");
    need_bos = false;
  };
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "user") {
      user_turn(m.content);
    } else if (m.role == "assistant") {
      out.append(" ").append(trim(m.content)).append(" </s>");
      need_bos = true;
    } else if (m.role == "system") {
      throw InvalidArgument(
          cat("chat template llama2: message ", i, ": a system message may only come first"));
    } else {
      throw InvalidArgument(cat("chat template llama2: message ", i, ": role '", m.role,
                                "' is not system, user or assistant"));
    }
  }
  if (system_pending && add_generation_prompt) user_turn("");
  return out;
}

}  // namespace tandem::llm
