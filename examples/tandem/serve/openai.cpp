// SPDX-License-Identifier: Apache-2.0
// Parsing and validation of OpenAI completion requests; see openai.h.
#include "openai.h"

#include <cmath>
#include <limits>

namespace tandem::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, "invalid_request_error", param);
}

const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const json& body, const char* name, double lo, double hi, double fallback) {
  const json* v = field(body, name);
  if (!v) return fallback;
  if (!v->is_number()) bad(name, std::string("'") + name + "' must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    bad(name, std::string("'") + name + "' must be in [" + dump(lo) + ", " + dump(hi) + "]");
  }
  return x;
}

std::optional<int64_t> integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(name, std::string("'") + name + "' must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    bad(name, std::string("'") + name + "' is too large");
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) {
    bad(name, std::string("'") + name + "' must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  }
  return x;
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts.
std::string content_text(const json& c, const std::string& param) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(param, "content must be a string or an array of text parts");
  std::string text;
  for (const json& part : c) {
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string()) {
      bad(param, "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json error_json(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

CompletionRequest parse_completion_request(const std::string& text, bool chat) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    bad("", std::string("the body is not valid JSON (UTF-8): ") + e.what());
  }
  if (!body.is_object()) bad("", "the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad("model", "'model' must be a string");
    r.model = m->get<std::string>();
  }
  if (chat) {
    const json* msgs = field(body, "messages");
    if (!msgs) bad("messages", "'messages' is required");
    if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      const std::string p = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) bad(p, p + " must be an object");
      const json* role = field(m, "role");
      if (!role || !role->is_string() || role->get<std::string>().empty()) {
        bad(p + ".role", p + ".role must be a non-empty string");
      }
      const json* content = field(m, "content");
      r.messages.push_back(
          {role->get<std::string>(), content ? content_text(*content, p + ".content") : ""});
    }
  } else {
    const json* p = field(body, "prompt");
    if (!p) bad("prompt", "'prompt' is required");
    if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) {
      r.prompt = (*p)[0].get<std::string>();
    } else if (p->is_string()) {
      r.prompt = p->get<std::string>();
    } else {
      bad("prompt", "'prompt' must be a string (or an array of one string)");
    }
  }
  constexpr int64_t kIntMax = std::numeric_limits<int32_t>::max();
  if (auto n = integer(body, "max_tokens", 1, kIntMax)) r.max_tokens = static_cast<int>(*n);
  if (auto n = integer(body, "max_completion_tokens", 1, kIntMax)) {
    r.max_tokens = static_cast<int>(*n);
  }
  if (const json* n = field(body, "n"); n && *n != 1) bad("n", "only n = 1 is supported");
  r.temperature = static_cast<float>(number(body, "temperature", 0.0, 2.0, 1.0));
  r.top_p = static_cast<float>(number(body, "top_p", 0.0, 1.0, 1.0));
  if (r.top_p == 0.0f) r.top_p = 1e-6f;  // OpenAI accepts 0: keep only the most likely token
  if (auto k = integer(body, "top_k", 0, kIntMax)) r.top_k = static_cast<int>(*k);
  if (const json* s = field(body, "seed")) {
    if (!s->is_number_integer()) bad("seed", "'seed' must be an integer");
    r.seed =
        s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    r.has_seed = true;
  }
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array() && s->size() <= 16) {
      for (const json& x : *s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", "'stop' must be a string or an array of at most 16 strings");
    }
    for (const std::string& x : r.stop) {
      if (x.empty()) bad("stop", "stop strings must not be empty");
    }
  }
  if (const json* s = field(body, "stream")) {
    if (!s->is_boolean()) bad("stream", "'stream' must be a boolean");
    r.stream = s->get<bool>();
  }
  if (const json* k = field(body, "kv_policy")) {
    if (!k->is_string() || k->get<std::string>().empty()) {
      bad("kv_policy", "'kv_policy' must be a non-empty string");
    }
    r.kv_policy = k->get<std::string>();
  }
  return r;
}

}  // namespace tandem::serve
