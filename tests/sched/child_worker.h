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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tandem/core/error.h"

extern char** environ;

namespace tandem::sched::test {

// One `tandem worker` child process; ended by pid (SIGKILL) on destruction.
class ChildWorker {
 public:
  ChildWorker(const std::filesystem::path& dir, const std::string& name,
              const std::string& key_path) {
    ep_file_ = (dir / (name + ".ep")).string();
    log_file_ = (dir / (name + ".log")).string();
    std::vector<std::string> args = {
        TANDEM_CLI_PATH, "worker",          "--listen", "tcp://127.0.0.1:0", "--key",
        key_path,        "--endpoint-file", ep_file_,   "--threads",         "1"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, TANDEM_CLI_PATH, &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw IoError("cannot spawn " + std::string(TANDEM_CLI_PATH));
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

}  // namespace tandem::sched::test
