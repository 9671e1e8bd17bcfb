// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>

#include "tandem/core/error.h"

namespace tandem {

namespace {
std::shared_ptr<spdlog::logger> make_logger() {
  if (auto existing = spdlog::get("tandem")) return existing;
  auto logger = spdlog::stderr_color_mt("tandem");
  logger->set_pattern("[%H:%M:%S.%e] [tandem] [%^%l%$] %v");
  logger->set_level(spdlog::level::warn);
  if (const char* env = std::getenv("TANDEM_LOG_LEVEL"); env && *env) {
    const auto lvl = spdlog::level::from_str(env);
    // from_str maps unknown names to off; accept that only when the user wrote "off".
    if (lvl != spdlog::level::off || std::string_view(env) == "off") logger->set_level(lvl);
  }
  return logger;
}
}  // namespace

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(std::string_view level) {
  const auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off")
    throw InvalidArgument(
        cat("unknown log level '", level, "' (trace, debug, info, warn, error, critical, off)"));
  log().set_level(lvl);
}

}  // namespace tandem
