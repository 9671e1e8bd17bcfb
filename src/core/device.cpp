// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/device.h"

#include <charconv>

#include "tandem/core/error.h"

namespace tandem {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::kCuda ? "cuda" : "cpu"; }

Device Device::parse(std::string_view text) {
  const auto colon = text.find(':');
  const std::string_view kind = text.substr(0, colon);
  int index = 0;
  if (colon != std::string_view::npos) {
    const std::string_view num = text.substr(colon + 1);
    const auto [ptr, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    if (num.empty() || ec != std::errc() || ptr != num.data() + num.size() || index < 0)
      throw InvalidArgument(cat("bad device '", text, "': index must be a non-negative integer"));
  }
  if (kind == "cpu") {
    if (index != 0) throw InvalidArgument(cat("bad device '", text, "': the CPU is device cpu:0"));
    return cpu();
  }
  if (kind == "cuda") return cuda(index);
  throw InvalidArgument(cat("bad device '", text, "' (expected cpu or cuda:N)"));
}

std::string Device::to_string() const {
  return type == DeviceType::kCpu ? std::string("cpu") : cat("cuda:", index);
}

}  // namespace tandem
