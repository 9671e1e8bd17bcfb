// SPDX-License-Identifier: Apache-2.0
#include "model_path.h"

#include "report.h"
#include "tandem/core/error.h"
#include "tandem/llm/model_store.h"

namespace tandem::cli {

std::string resolve_model_path(const std::string& model_arg, bool progress) {
  if (!model_arg.empty()) return model_arg;
  Progress line(progress);  // a "\r" line on stderr, only when it is a terminal
  llm::FetchOptions fo;
  fo.progress = [&line](const std::string& stage, int64_t done, int64_t total) {
    line.update(total > 0 ? cat(stage, ": ", 100 * done / total, "%") : stage);
  };
  return llm::default_model_path(fo);
}

}  // namespace tandem::cli
