// SPDX-License-Identifier: Apache-2.0
#include "cnn/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <fstream>

#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem::cnn {

namespace {

constexpr int64_t kMaxTensorElements = int64_t{1} << 31;

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Reads the bytes of an external-data tensor: location (relative, no "..") + offset + length.
std::string read_external(const onnx::TensorProto& t, const TensorSource& src, size_t want) {
  const std::string& name = t.name();
  if (src.dir.empty())
    throw ParseError(src.source, -1,
                     cat("tensor '", name, "' uses external data, which needs a model file"));
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    try {
      if (kv.key() == "location") location = kv.value();
      if (kv.key() == "offset") offset = std::stoll(kv.value());
      if (kv.key() == "length") length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw ParseError(src.source, -1,
                       cat("tensor '", name, "': external_data '", kv.key(), "' is not a number: '",
                           kv.value(), "'"));
    }
  }
  const std::filesystem::path rel(location);
  if (location.empty() || rel.is_absolute())
    throw ParseError(src.source, -1,
                     cat("tensor '", name, "': external data location '", location,
                         "' must be a relative path"));
  for (const auto& part : rel)
    if (part == "..")
      throw ParseError(src.source, -1,
                       cat("tensor '", name, "': external data location '", location,
                           "' leaves the model's directory"));
  if (offset < 0 || (length >= 0 && static_cast<size_t>(length) != want))
    throw ParseError(src.source, -1,
                     cat("tensor '", name, "': external data offset ", offset, " / length ", length,
                         " does not fit ", want, " bytes"));
  const std::filesystem::path file = src.dir / rel;
  std::error_code ec;
  if (std::filesystem::exists(file, ec) && !std::filesystem::is_regular_file(file, ec))
    throw ParseError(src.source, -1,
                     cat("tensor '", name, "': external data location '", location, "' (",
                         file.string(), ") is not a regular file"));
  std::ifstream f(file, std::ios::binary);
  if (!f)
    throw NotFound(cat(src.source, ": tensor '", name, "': external data file '", file.string(),
                       "' cannot be opened"));
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (size < 0 || offset > size || static_cast<int64_t>(want) > size - offset)
    throw ParseError(file.string(), offset,
                     cat("tensor '", name, "': ", want, " bytes at offset ", offset,
                         " run past the end of the file (", size, " bytes)"));
  std::string bytes(want, '\0');
  f.seekg(offset);
  f.read(bytes.data(), static_cast<std::streamsize>(want));
  if (!f) throw IoError(cat("reading external data of tensor '", name, "' from ", file.string()));
  return bytes;
}

}  // namespace

Tensor decode_tensor(const onnx::TensorProto& t, const TensorSource& src, DecodedType* type) {
  const std::string& name = t.name();
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (dims.size() > static_cast<size_t>(kMaxRank))
    throw ParseError(src.source, -1, cat("tensor '", name, "' has rank ", dims.size()));
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxTensorElements / d))
      throw ParseError(src.source, -1, cat("tensor '", name, "' has invalid dims"));
    n *= d;
  }
  if (t.has_segment()) throw Unsupported(cat(src.source, ": tensor '", name, "' is segmented"));
  const int dt = t.data_type();
  size_t elem = 0;
  bool is_float = true;
  switch (dt) {
    case onnx::TensorProto::FLOAT:
      elem = 4;
      break;
    case onnx::TensorProto::DOUBLE:
      elem = 8;
      break;
    case onnx::TensorProto::FLOAT16:
      elem = 2;
      break;
    case onnx::TensorProto::INT64:
      elem = 8, is_float = false;
      break;
    case onnx::TensorProto::INT32:
      elem = 4, is_float = false;
      break;
    default:
      throw Unsupported(cat(src.source, ": tensor '", name, "' has element type ", dt,
                            " (float, double, float16, int32 and int64 are supported)"));
  }
  *type = is_float ? DecodedType::kFloat : DecodedType::kInt64;
  const Shape shape = dims.empty() ? Shape{1} : Shape(dims);  // scalars become [1]
  Tensor out = Tensor::empty(shape, is_float ? DType::kF32 : DType::kI64);
  const size_t want = static_cast<size_t>(n) * elem;
  std::string external;
  const std::string* raw = nullptr;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    external = read_external(t, src, want);
    raw = &external;
  } else if (t.has_raw_data()) {
    raw = &t.raw_data();
  }
  auto mismatch = [&](size_t have) {
    throw ParseError(src.source, -1,
                     cat("tensor '", name, "': ", have, " values/bytes for dims of ", n,
                         " elements (", want, " bytes)"));
  };
  if (raw) {
    if (raw->size() != want) mismatch(raw->size());
    const char* p = raw->data();
    for (int64_t i = 0; i < n; ++i, p += elem) {
      switch (dt) {
        case onnx::TensorProto::FLOAT:
          std::memcpy(out.data<float>() + i, p, 4);
          break;
        case onnx::TensorProto::DOUBLE: {
          double v;
          std::memcpy(&v, p, 8);
          out.data<float>()[i] = static_cast<float>(v);
          break;
        }
        case onnx::TensorProto::FLOAT16: {
          uint16_t h;
          std::memcpy(&h, p, 2);
          out.data<float>()[i] = half_to_float(h);
          break;
        }
        case onnx::TensorProto::INT64:
          std::memcpy(out.data<int64_t>() + i, p, 8);
          break;
        case onnx::TensorProto::INT32: {
          int32_t v;
          std::memcpy(&v, p, 4);
          out.data<int64_t>()[i] = v;
          break;
        }
      }
    }
    return out;
  }
  switch (dt) {
    case onnx::TensorProto::FLOAT:
      if (t.float_data_size() != n) mismatch(t.float_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<float>()[i] = t.float_data(static_cast<int>(i));
      break;
    case onnx::TensorProto::DOUBLE:
      if (t.double_data_size() != n) mismatch(t.double_data_size());
      for (int64_t i = 0; i < n; ++i)
        out.data<float>()[i] = static_cast<float>(t.double_data(static_cast<int>(i)));
      break;
    case onnx::TensorProto::FLOAT16:  // stored as uint16 bit patterns in int32_data
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i)
        out.data<float>()[i] =
            half_to_float(static_cast<uint16_t>(t.int32_data(static_cast<int>(i))));
      break;
    case onnx::TensorProto::INT64:
      if (t.int64_data_size() != n) mismatch(t.int64_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = t.int64_data(static_cast<int>(i));
      break;
    case onnx::TensorProto::INT32:
      if (t.int32_data_size() != n) mismatch(t.int32_data_size());
      for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = t.int32_data(static_cast<int>(i));
      break;
  }
  return out;
}

}  // namespace tandem::cnn
