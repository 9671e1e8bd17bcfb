// SPDX-License-Identifier: Apache-2.0
#include "model_path.h"

#include <unistd.h>

#include <cstdio>

#include "tandem/llm/model_store.h"

namespace tandem::cli {

std::string resolve_model_path(const std::string& model_arg, bool progress) {
  if (!model_arg.empty()) return model_arg;
  llm::FetchOptions fo;
  if (progress && isatty(2)) {
    fo.progress = [](const std::string& stage, int64_t done, int64_t total) {
      if (total > 0) {
        std::fprintf(stderr, "\r%s: %3d%%", stage.c_str(), static_cast<int>(100 * done / total));
        if (done == total) std::fprintf(stderr, "\n");
      } else {
        std::fprintf(stderr, "%s\n", stage.c_str());
      }
    };
  }
  return llm::default_model_path(fo);
}

}  // namespace tandem::cli
