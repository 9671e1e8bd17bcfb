// SPDX-License-Identifier: Apache-2.0
// What this libtandem was built as: version, git commit, compiler, build type, compiled backends
// and GEMM providers. Every machine-readable record the tools and benchmarks write carries it as
// "build".
//
//   std::cout << tandem::build_info_json().dump(2);
#pragma once

#include <nlohmann/json.hpp>

#include "tandem/export.h"

namespace tandem {

TANDEM_API nlohmann::json build_info_json();

}  // namespace tandem
