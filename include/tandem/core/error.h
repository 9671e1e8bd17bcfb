// SPDX-License-Identifier: Apache-2.0
// Errors. Expected failures raise a tandem::Error subclass whose message says what was wrong and
// where:
//   InvalidArgument  bad shapes, dtypes, options passed by a caller
//   NotFound         missing file, device, backend, tensor or key
//   ParseError       malformed file or config; carries the source and byte offset / field
//   Unsupported      an op, dtype or feature a backend does not implement
//   Infeasible       no plan satisfies the constraints (memory, devices)
//   OutOfMemory      an allocator could not satisfy a request
//   DeviceError      a device runtime call failed (CUDA errors, lost devices)
//   IoError          reading or writing a file or socket failed
// Contract checks inside the library:   TANDEM_CHECK(n % 32 == 0) << "n=" << n;
// throws ContractError("file.cpp:42: check failed: n % 32 == 0: n=33"). Never aborts.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>

#include "tandem/export.h"

namespace tandem {

class TANDEM_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

class TANDEM_API InvalidArgument : public Error {
  using Error::Error;
};
class TANDEM_API NotFound : public Error {
  using Error::Error;
};
class TANDEM_API Unsupported : public Error {
  using Error::Error;
};
class TANDEM_API Infeasible : public Error {
  using Error::Error;
};
class TANDEM_API OutOfMemory : public Error {
  using Error::Error;
};
class TANDEM_API DeviceError : public Error {
  using Error::Error;
};
class TANDEM_API IoError : public Error {
  using Error::Error;
};
class TANDEM_API ContractError : public Error {
  using Error::Error;
};

// A malformed input: `source` names the file or config, `offset` the byte offset (or -1 when not
// known).
class TANDEM_API ParseError : public Error {
 public:
  ParseError(const std::string& source, int64_t offset, const std::string& what);
  const std::string& source() const { return source_; }
  int64_t offset() const { return offset_; }

 private:
  std::string source_;
  int64_t offset_;
};

namespace detail {

// Collects the message of a failed check; Thrower's operator& throws it (lower precedence than <<).
class CheckMessage {
 public:
  CheckMessage(const char* file, int line, const char* cond) {
    os_ << file << ':' << line << ": check failed: " << cond;
    first_ = true;
  }
  template <class T>
  CheckMessage& operator<<(const T& v) {
    if (first_) {
      os_ << ": ";
      first_ = false;
    }
    os_ << v;
    return *this;
  }
  std::string str() const { return os_.str(); }

 private:
  std::ostringstream os_;
  bool first_ = true;
};

struct Thrower {
  [[noreturn]] void operator&(const CheckMessage& m) const { throw ContractError(m.str()); }
};

// Builds "what" messages inline: throw InvalidArgument(cat("bad rank ", r)).
template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace detail

using detail::cat;

}  // namespace tandem

#define TANDEM_CHECK(cond)       \
  if (static_cast<bool>(cond)) { \
  } else                         \
    ::tandem::detail::Thrower{} & ::tandem::detail::CheckMessage(__FILE__, __LINE__, #cond)
