// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/build_info.h"

#include "tandem/version.h"

namespace tandem {

nlohmann::json build_info_json() {
  nlohmann::json backends = nlohmann::json::array({"cpu"});
  if (TANDEM_WITH_CUDA_MODULE) backends.push_back("cuda");
  return {{"version", TANDEM_VERSION_STRING},     {"git_commit", TANDEM_GIT_COMMIT},
          {"compiler", TANDEM_COMPILER},          {"build_type", TANDEM_BUILD_TYPE},
          {"backends_compiled", backends},        {"onednn", TANDEM_WITH_DNNL == 1},
          {"openblas", TANDEM_WITH_OPENBLAS == 1}};
}

}  // namespace tandem
