// SPDX-License-Identifier: Apache-2.0
// ChildWorker: one `tandem worker` process on tcp loopback with a cluster key, spawned for the
// multi-process tests (test_dist.cpp, test_hpipe_dist.cpp); SIGKILLed by pid on destruction.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "tandem/core/error.h"
#include "tandem/sched/pipeline.h"

extern char** environ;

namespace tandem::sched::test {

// One `tandem worker` child process; ended by pid (SIGKILL) on destruction.
class ChildWorker {
 public:
  // `prefix`: a command the worker runs under (e.g. {"ip", "netns", "exec", ns}: it must exec the
  // worker, so the pid stays the worker's), found on PATH; `listen`: the worker's --listen.
  ChildWorker(const std::filesystem::path& dir, const std::string& name,
              const std::string& key_path, std::vector<std::string> prefix = {},
              const std::string& listen = "tcp://127.0.0.1:0") {
    ep_file_ = (dir / (name + ".ep")).string();
    log_file_ = (dir / (name + ".log")).string();
    std::vector<std::string> args = std::move(prefix);
    for (std::string a :
         {std::string(TANDEM_CLI_PATH), std::string("worker"), std::string("--listen"), listen,
          std::string("--key"), key_path, std::string("--endpoint-file"), ep_file_,
          std::string("--threads"), std::string("1")})
      args.push_back(std::move(a));
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawnp(&pid_, args[0].c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw IoError("cannot spawn " + args[0]);
  }
  ~ChildWorker() { kill_now(); }

  // The bound endpoint, waiting up to 10 s for the worker to write it.
  std::string endpoint() {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(ep_file_);
      std::string ep;
      if (in && std::getline(in, ep) && !ep.empty()) return ep;
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw IoError("worker exited early; log: " + log());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    throw IoError("worker did not write " + ep_file_ + " within 10 s");
  }
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }
  void kill_now() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string log() const {
    std::ifstream in(log_file_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  pid_t pid_ = -1;
  std::string ep_file_, log_file_;
};

// Starts n workers w0..w{n-1} in `dir` holding `key_path` (kept in `workers`); returns the device
// map dev<i> -> endpoint that PipelineOptions::workers takes.
inline std::map<std::string, std::string> start_workers(
    std::vector<std::unique_ptr<ChildWorker>>& workers, const std::filesystem::path& dir,
    const std::string& key_path, int n) {
  std::map<std::string, std::string> map;
  using tandem::fixtures::numbered;
  for (int i = 0; i < n; ++i)
    workers.push_back(std::make_unique<ChildWorker>(dir, numbered("w", i), key_path));
  for (int i = 0; i < n; ++i) map[numbered("dev", i)] = workers[i]->endpoint();
  return map;
}

// Pipeline options of the multi-process tests: the cluster key, 50 ms heartbeats and a generous
// 1 s loss timeout (CI runs these under sanitizers on busy cores).
inline PipelineOptions worker_pipeline_options(const ClusterKey& key, double run_timeout_s) {
  PipelineOptions o;
  o.key = key;
  o.client.heartbeat_interval_s = 0.05;
  o.client.heartbeat_timeout_s = 1.0;
  o.client.connect_timeout_s = 5.0;
  o.run_timeout_s = run_timeout_s;
  return o;
}

}  // namespace tandem::sched::test
