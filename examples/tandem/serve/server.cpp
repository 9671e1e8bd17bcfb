// SPDX-License-Identifier: Apache-2.0
// The HTTP layer of `tandem serve`: routes, authentication, validation, streaming; see server.h.
#include "server.h"

#include <sys/socket.h>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "engine.h"
#include "openai.h"
#include "tandem/core/allocator.h"
#include "tandem/core/error.h"
#include "tandem/llm/chat_template.h"

namespace tandem::serve {
namespace {

using httplib::Request;
using httplib::Response;
using nlohmann::json;

void send_json(Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(dump(j), "application/json");
}

void send_error(Response& res, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");
  send_json(res, error_json(e), e.status);
}

// Compares without an early exit, so the time taken does not tell how much of a key matched.
bool same_key(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }

}  // namespace

struct Server::Impl {
  Impl(const llm::Model& m, const llm::Tokenizer& t, ServeOptions o)
      : model(m),
        tokenizer(t),
        options(std::move(o)),
        chat(llm::ChatTemplate::detect(t.vocab().chat_template, /*fallback_to_chatml=*/true)),
        engine(m, t,
               {.parallel = options.parallel,
                .queue_limit = options.queue_limit,
                .kv_budget_bytes = options.kv_budget_bytes}) {
    ctx = model.config().context_length;
    if (options.ctx > 0) ctx = std::min<int64_t>(ctx, options.ctx);
    model_id = options.model_id;
    if (model_id.empty()) model_id = model.config().name.empty() ? "tandem" : model.config().name;
    routes();
  }

  void routes();
  void completion(const Request& req, Response& res, bool chat);
  json usage(const Job& job, size_t prompt_tokens) const {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", job.completion_tokens},
            {"total_tokens", static_cast<int64_t>(prompt_tokens) + job.completion_tokens}};
  }
  static json extension(const Job& job) {
    return {{"kv_bytes", job.kv_bytes},
            {"ttft_s", job.ttft_s},
            {"decode_tokens_per_s", job.decode_tokens_per_s}};
  }

  const llm::Model& model;
  const llm::Tokenizer& tokenizer;
  ServeOptions options;
  llm::ChatTemplate chat;
  Engine engine;
  int64_t ctx = 0;
  std::string model_id;
  httplib::Server http;
  std::atomic<uint64_t> next_id{1};
  std::thread thread;
  int port = 0;
};

void Server::Impl::routes() {
  const size_t threads = options.http_threads > 0
                             ? static_cast<size_t>(options.http_threads)
                             : static_cast<size_t>(options.parallel + options.queue_limit + 4);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options.max_body_bytes);
  http.set_read_timeout(30);
  http.set_write_timeout(30);
  http.set_logger(
      [this](const Request&, const Response& res) { engine.metrics().count_request(res.status); });
  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    if (options.api_key.empty() || req.path == "/health" || req.path == "/") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.compare(0, prefix.size(), prefix) == 0 &&
        same_key(auth.substr(prefix.size()), options.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, ApiError(401, "Invalid or missing API key (Authorization: Bearer KEY)",
                             "invalid_request_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const Request& req, Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 413) {
          send_error(res, ApiError(413, "The request body is too large"));
        } else if (res.status == 404) {
          send_error(res, ApiError(404, "No such endpoint: " + req.method + " " + req.path,
                                   "invalid_request_error", "", "not_found"));
        } else {
          send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status)));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler([](const Request&, Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "Internal error: " + what, "server_error"));
  });

  http.Get("/health", [](const Request&, Response& res) { send_json(res, {{"status", "ok"}}); });
  http.Get("/", [](const Request&, Response& res) {
    res.set_content(web_page_html(), "text/html; charset=utf-8");
  });
  http.Get("/metrics", [this](const Request&, Response& res) {
    const MemoryStats mem = allocator(model.device()).stats();
    const Gauges g{engine.queued(), engine.running(), engine.kv_bytes(), mem.current_bytes,
                   mem.peak_bytes};
    res.set_content(engine.metrics().render(g), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const Request&, Response& res) {
    send_json(res, {{"object", "list"},
                    {"data",
                     {{{"id", model_id},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "tandem"},
                       {"context_length", ctx}}}}});
  });
  http.Post("/v1/chat/completions",
            [this](const Request& req, Response& res) { completion(req, res, true); });
  http.Post("/v1/completions",
            [this](const Request& req, Response& res) { completion(req, res, false); });
}

void Server::Impl::completion(const Request& req, Response& res, bool is_chat) try {
  const CompletionRequest r = parse_completion_request(req.body, is_chat);
  if (!r.model.empty() && r.model != model_id) {
    throw ApiError(
        404, "The model '" + r.model + "' does not exist (this server has '" + model_id + "')",
        "invalid_request_error", "model", "model_not_found");
  }
  const std::string what = is_chat ? "messages" : "prompt";
  std::string text = r.prompt;
  if (is_chat) {
    try {
      text = chat.apply(r.messages, /*add_generation_prompt=*/true);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", "messages");
    }
  }
  auto job = std::make_shared<Job>();
  // Chat markers in the template are control tokens; a plain prompt's text never is.
  job->prompt = tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/is_chat);
  const int64_t n_prompt = static_cast<int64_t>(job->prompt.size());
  if (n_prompt == 0)
    throw ApiError(400, "The prompt encodes to no tokens", "invalid_request_error", what);
  if (n_prompt >= ctx) {
    throw ApiError(400,
                   "The prompt has " + std::to_string(n_prompt) + " tokens; the context is " +
                       std::to_string(ctx),
                   "invalid_request_error", what, "context_length_exceeded");
  }
  job->options.max_new_tokens = static_cast<int>(
      std::min<int64_t>(r.max_tokens.value_or(options.default_max_tokens), ctx - n_prompt));
  job->options.prefill_chunk = options.prefill_chunk;
  job->options.decode = options.decode;
  job->options.sampler = {.temperature = r.temperature,
                          .top_k = r.top_k,
                          .top_p = r.top_p,
                          .seed = r.has_seed ? r.seed : std::random_device{}()};
  job->stop = r.stop;
  std::shared_ptr<llm::KvPolicy> policy;
  if (options.make_policy) {
    try {
      policy = options.make_policy(r.kv_policy);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", "kv_policy");
    }
  } else if (!r.kv_policy.empty()) {
    throw ApiError(400, "This server does not take per-request KV policies",
                   "invalid_request_error", "kv_policy");
  }
  job->cache = std::make_unique<llm::KvCache>(model.make_cache(policy, 32, options.kv_dtype));
  job->kv_full_bytes = full_cache_bytes(*job->cache, n_prompt + job->options.max_new_tokens);
  if (!engine.submit(job)) {
    throw ApiError(503, "The server is busy (the request queue is full); retry later",
                   "server_error", "", "queue_full");
  }

  const std::string id = (is_chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const char* object = is_chat ? "chat.completion" : "text_completion";
  if (!r.stream) {
    std::unique_lock lock(job->mu);
    job->cv.wait(lock, [&] { return job->done; });
    if (job->finish_reason == "error") throw ApiError(500, job->error, "server_error");
    json choice = {{"index", 0}, {"finish_reason", job->finish_reason}, {"logprobs", nullptr}};
    if (is_chat) {
      choice["message"] = {{"role", "assistant"}, {"content", job->out}};
    } else {
      choice["text"] = job->out;
    }
    send_json(res, {{"id", id},
                    {"object", object},
                    {"created", created},
                    {"model", model_id},
                    {"choices", json::array({choice})},
                    {"usage", usage(*job, static_cast<size_t>(n_prompt))},
                    {"tandem", extension(*job)}});
    return;
  }

  // Streaming: one chunk per batch of new text, a last chunk with finish_reason, usage and the
  // "tandem" extension, then [DONE]. A failed write (client gone) cancels the sequence.
  const std::string chunk_object = is_chat ? "chat.completion.chunk" : "text_completion";
  auto chunk = [=, this](const json& delta_or_text, const json& finish) {
    json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
    if (is_chat) {
      choice["delta"] = delta_or_text;
    } else {
      choice["text"] = delta_or_text;
    }
    return json{{"id", id},
                {"object", chunk_object},
                {"created", created},
                {"model", model_id},
                {"choices", json::array({choice})}};
  };
  auto started = std::make_shared<bool>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job, chunk, started, is_chat, n_prompt](size_t, httplib::DataSink& sink) {
        std::string payload;
        if (!*started && is_chat) {
          payload += sse(chunk({{"role", "assistant"}, {"content", ""}}, nullptr));
        }
        *started = true;
        std::string text;
        bool done = false;
        {
          std::unique_lock lock(job->mu);
          job->cv.wait_for(lock, std::chrono::milliseconds(200),
                           [&] { return !job->out.empty() || job->done; });
          text.swap(job->out);
          done = job->done;
        }
        if (!text.empty()) {
          payload += sse(chunk(is_chat ? json{{"content", text}} : json(text), nullptr));
        }
        if (done) {
          if (job->finish_reason == "error") {
            payload += sse(error_json(ApiError(500, job->error, "server_error")));
          } else {
            json last = chunk(is_chat ? json::object() : json(""), job->finish_reason);
            last["usage"] = usage(*job, static_cast<size_t>(n_prompt));
            last["tandem"] = extension(*job);
            payload += sse(last);
          }
          payload += "data: [DONE]\n\n";
        }
        if (!payload.empty() && !sink.write(payload.data(), payload.size())) {
          engine.cancel(job);
          return false;
        }
        if (done) sink.done();
        return true;
      },
      [this, job](bool success) {
        if (!success) engine.cancel(job);
      });
} catch (const ApiError& e) {
  send_error(res, e);
}

Server::Server(const llm::Model& model, const llm::Tokenizer& tokenizer, ServeOptions options)
    : impl_(std::make_unique<Impl>(model, tokenizer, std::move(options))) {}

Server::~Server() { stop(); }

int Server::start() {
  const std::string& host = impl_->options.host;
  // cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed in Debian's
  // compiled library): a burst of more new connections overflows the accept queue, the kernel
  // answers with SYN cookies and drops ACKs, and some clients see their connection fail ("Read"
  // errors in a 32-client soak). So the listening socket is recorded when it is made and listen()
  // is called again with the system's maximum once it is bound.
  int listen_fd = -1;
  impl_->http.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    if (listen_fd < 0) listen_fd = static_cast<int>(sock);
  });
  if (impl_->options.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(host);
  } else if (impl_->http.bind_to_port(host, impl_->options.port)) {
    impl_->port = impl_->options.port;
  } else {
    impl_->port = -1;
  }
  if (impl_->port <= 0) {
    throw IoError("serve: cannot listen on " + host + ":" + std::to_string(impl_->options.port));
  }
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  impl_->http.set_socket_options(httplib::default_socket_options);
  impl_->thread = std::thread([this] { impl_->http.listen_after_bind(); });
  return impl_->port;
}

void Server::run() {
  start();
  impl_->thread.join();
}

void Server::stop() {
  impl_->http.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

int Server::port() const { return impl_->port; }
const std::string& Server::model_id() const { return impl_->model_id; }
Engine& Server::engine() { return impl_->engine; }

}  // namespace tandem::serve
