// SPDX-License-Identifier: Apache-2.0
// The OpenAI wire format of `tandem serve`: request bodies of /v1/chat/completions and
// /v1/completions parsed and validated into a CompletionRequest (ApiError, status 400, naming the
// bad field), and the JSON of responses, stream chunks and errors. The OpenAI API reference is
// the contract; extensions: top_k, kv_policy (request), "tandem" (timing and KV bytes, response).
// Thread-safety: plain functions.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tandem/llm/chat_template.h"

namespace tandem::serve {

// An answer other than 200: the HTTP status and the OpenAI error object's fields.
struct ApiError : std::runtime_error {
  ApiError(int status_, std::string message, std::string type_ = "invalid_request_error",
           std::string param_ = {}, std::string code_ = {})
      : std::runtime_error(message),
        status(status_),
        type(std::move(type_)),
        param(std::move(param_)),
        code(std::move(code_)) {}
  int status;
  std::string type, param, code;  // empty param / code: null
};

// {"error": {"message", "type", "param", "code"}}.
nlohmann::json error_json(const ApiError& e);

struct CompletionRequest {
  bool chat = false;
  std::vector<llm::ChatMessage> messages;  // chat
  std::string prompt;                      // completion
  std::string model;                       // empty when not given
  std::optional<int> max_tokens;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool has_seed = false;
  std::vector<std::string> stop;
  bool stream = false;
  std::string kv_policy;  // extension: this request's KV policy (empty: the server's)
};

// Parses a request body; ApiError 400 for malformed JSON, invalid UTF-8, wrong types or values
// (param names the field), n != 1.
CompletionRequest parse_completion_request(const std::string& body, bool chat);

// Text to JSON that never throws on invalid UTF-8 in generated text (replaced by U+FFFD).
std::string dump(const nlohmann::json& j);

}  // namespace tandem::serve
