// SPDX-License-Identifier: Apache-2.0
// `tandem worker`: serves pipeline stages for a coordinator (tandem::sched::Worker), or writes a
// cluster key (--gen-key FILE).
#include <csignal>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "tandem/core/backend.h"
#include "tandem/core/log.h"
#include "tandem/sched/worker.h"

namespace tandem::cli {
namespace {

struct WorkerCmdOptions {
  std::string listen = "tcp://127.0.0.1:0";
  std::string key_path;
  std::string gen_key;
  std::string endpoint_file;
  int threads = 0;
  bool insecure = false;
};

sched::Worker* g_worker = nullptr;

extern "C" void on_signal(int) {
  if (g_worker) g_worker->stop();  // an atomic store: async-signal-safe
}

int run_worker(const WorkerCmdOptions& o) {
  if (!o.gen_key.empty()) {
    sched::ClusterKey::generate().save(o.gen_key);
    std::printf(
        "wrote a CURVE key pair to %s (give the same file to every worker and the coordinator)\n",
        o.gen_key.c_str());
    return 0;
  }
  sched::WorkerOptions wo;
  wo.listen = o.listen;
  wo.threads = o.threads;
  wo.endpoint_file = o.endpoint_file;
  if (!o.key_path.empty()) {
    wo.key = sched::ClusterKey::load(o.key_path);
  } else if (!o.insecure && o.listen.rfind("tcp://", 0) == 0) {
    std::fprintf(
        stderr,
        "tandem worker: a tcp:// worker needs --key FILE (make one with --gen-key FILE), or "
        "--insecure to accept anyone who can reach the port\n");
    return 2;
  }
  if (o.threads > 0) set_cpu_num_threads(o.threads);
  sched::Worker worker(wo);
  g_worker = &worker;
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::fprintf(stderr, "tandem worker: listening on %s\n", worker.endpoint().c_str());
  worker.run();
  g_worker = nullptr;
  return 0;
}

const CommandRegistration kReg([](CLI::App& app) {
  auto o = std::make_shared<WorkerCmdOptions>();
  CLI::App* sub =
      app.add_subcommand("worker", "Serve pipeline stages for a coordinator (tandem pipeline run)");
  sub->add_option("--listen", o->listen,
                  "Bind address: tcp://HOST:PORT (port 0 picks a free one), ipc://PATH")
      ->capture_default_str();
  sub->add_option("--key", o->key_path,
                  "Cluster CURVE key file (from --gen-key); peers without it are refused");
  sub->add_option("--gen-key", o->gen_key, "Write a new cluster key pair to FILE and exit");
  sub->add_option("--endpoint-file", o->endpoint_file,
                  "Write the bound endpoint to FILE once listening");
  sub->add_option("-t,--threads", o->threads, "CPU threads for the stages (0: default)")
      ->check(CLI::Range(0, 4096));
  sub->add_flag("--insecure", o->insecure, "Allow tcp:// without a key (trusted networks only)");
  return Command{sub, [o] { return run_worker(*o); }};
});

}  // namespace
}  // namespace tandem::cli
