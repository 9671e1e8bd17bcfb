// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/error.h"

namespace tandem {

ParseError::ParseError(const std::string& source, int64_t offset, const std::string& what)
    : Error(offset >= 0 ? cat(source, " at byte ", offset, ": ", what) : cat(source, ": ", what)),
      source_(source),
      offset_(offset) {}

}  // namespace tandem
