// SPDX-License-Identifier: Apache-2.0
// The library's one logger, spdlog "tandem", writing to stderr (the library never prints to
// stdout). Level from TANDEM_LOG_LEVEL (trace, debug, info, warn, error, off; default warn) or
// set_log_level().
//
//   tandem::log().info("loaded {} tensors from {}", n, path);
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "tandem/export.h"

namespace tandem {

TANDEM_API spdlog::logger& log();
// Accepts the spdlog level names; throws InvalidArgument for others.
TANDEM_API void set_log_level(std::string_view level);

}  // namespace tandem
