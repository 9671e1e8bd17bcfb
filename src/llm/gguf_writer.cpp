// SPDX-License-Identifier: Apache-2.0
// GgufWriter: builds a little-endian GGUF v3 (or v2) file in memory: header, metadata in insertion
// order, tensor infos, zero padding to the alignment, then each tensor's bytes at an aligned
// offset.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof(T));
}

void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

// Encodes an integer as the given GGUF integer type; InvalidArgument when it does not fit.
void put_int(std::vector<uint8_t>& out, const std::string& key, int64_t v, GgufType type) {
  auto check = [&](int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      throw InvalidArgument(
          cat("GgufWriter: value ", v, " of '", key, "' does not fit a ", gguf_type_name(type)));
  };
  switch (type) {
    case GgufType::kU8:
      check(0, UINT8_MAX);
      put<uint8_t>(out, static_cast<uint8_t>(v));
      break;
    case GgufType::kI8:
      check(INT8_MIN, INT8_MAX);
      put<int8_t>(out, static_cast<int8_t>(v));
      break;
    case GgufType::kU16:
      check(0, UINT16_MAX);
      put<uint16_t>(out, static_cast<uint16_t>(v));
      break;
    case GgufType::kI16:
      check(INT16_MIN, INT16_MAX);
      put<int16_t>(out, static_cast<int16_t>(v));
      break;
    case GgufType::kU32:
      check(0, UINT32_MAX);
      put<uint32_t>(out, static_cast<uint32_t>(v));
      break;
    case GgufType::kI32:
      check(INT32_MIN, INT32_MAX);
      put<int32_t>(out, static_cast<int32_t>(v));
      break;
    case GgufType::kU64:
      check(0, INT64_MAX);
      put<uint64_t>(out, static_cast<uint64_t>(v));
      break;
    case GgufType::kI64:
      put<int64_t>(out, v);
      break;
    default:
      throw InvalidArgument(
          cat("GgufWriter: '", key, "': ", gguf_type_name(type), " is not an integer type"));
  }
}

void put_float(std::vector<uint8_t>& out, const std::string& key, double v, GgufType type) {
  if (type == GgufType::kF32) {
    put<float>(out, static_cast<float>(v));
  } else if (type == GgufType::kF64) {
    put<double>(out, v);
  } else {
    throw InvalidArgument(
        cat("GgufWriter: '", key, "': ", gguf_type_name(type), " is not a float type"));
  }
}

uint64_t aligned_offset(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

struct GgufWriter::Impl {
  struct Kv {
    std::string key;
    GgufType type;
    std::vector<uint8_t> payload;
  };
  struct TensorEntry {
    std::string name;
    uint32_t ggml_type;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Kv> kvs;
  std::unordered_map<std::string, size_t> kv_index;
  std::vector<TensorEntry> tensors;
  std::unordered_map<std::string, size_t> tensor_index;
  uint32_t alignment = 32;
  uint32_t version = 3;

  void set(const std::string& key, GgufType type, std::vector<uint8_t> payload) {
    if (key.empty()) throw InvalidArgument("GgufWriter: empty metadata key");
    if (auto it = kv_index.find(key); it != kv_index.end()) {
      kvs[it->second].type = type;
      kvs[it->second].payload = std::move(payload);
      return;
    }
    kv_index.emplace(key, kvs.size());
    kvs.push_back({key, type, std::move(payload)});
  }
};

GgufWriter::GgufWriter() : impl_(std::make_unique<Impl>()) {}
GgufWriter::~GgufWriter() = default;

void GgufWriter::set_string(const std::string& key, const std::string& value) {
  std::vector<uint8_t> p;
  put_string(p, value);
  impl_->set(key, GgufType::kString, std::move(p));
}

void GgufWriter::set_int(const std::string& key, int64_t value, GgufType type) {
  std::vector<uint8_t> p;
  put_int(p, key, value, type);
  impl_->set(key, type, std::move(p));
}

void GgufWriter::set_float(const std::string& key, double value, GgufType type) {
  std::vector<uint8_t> p;
  put_float(p, key, value, type);
  impl_->set(key, type, std::move(p));
}

void GgufWriter::set_bool(const std::string& key, bool value) {
  impl_->set(key, GgufType::kBool, {static_cast<uint8_t>(value ? 1 : 0)});
}

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& values) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, static_cast<uint32_t>(GgufType::kString));
  put<uint64_t>(p, values.size());
  for (const auto& s : values) put_string(p, s);
  impl_->set(key, GgufType::kArray, std::move(p));
}

void GgufWriter::set_int_array(const std::string& key, const std::vector<int64_t>& values,
                               GgufType type) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, static_cast<uint32_t>(type));
  put<uint64_t>(p, values.size());
  if (type == GgufType::kBool) {
    for (int64_t v : values) {
      if (v != 0 && v != 1)
        throw InvalidArgument(cat("GgufWriter: bool array '", key, "' holds ", v));
      put<uint8_t>(p, static_cast<uint8_t>(v));
    }
  } else {
    for (int64_t v : values) put_int(p, key, v, type);
  }
  impl_->set(key, GgufType::kArray, std::move(p));
}

void GgufWriter::set_float_array(const std::string& key, const std::vector<double>& values,
                                 GgufType type) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, static_cast<uint32_t>(type));
  put<uint64_t>(p, values.size());
  for (double v : values) put_float(p, key, v, type);
  impl_->set(key, GgufType::kArray, std::move(p));
}

void GgufWriter::set_raw(const std::string& key, GgufType type, std::vector<uint8_t> payload) {
  impl_->set(key, type, std::move(payload));
}

void GgufWriter::add_tensor(const std::string& name, const Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgument(cat("GgufWriter: tensor '", name, "' is undefined"));
  const uint32_t type = ggml_type_from_dtype(tensor.dtype());
  const Tensor host =
      tensor.device().is_cpu() ? tensor.contiguous() : tensor.to(Device::cpu()).contiguous();
  std::vector<uint8_t> bytes(static_cast<size_t>(host.nbytes()));
  std::memcpy(bytes.data(), host.raw_data(), bytes.size());
  add_tensor_raw(name, type, host.shape(), std::move(bytes));
}

void GgufWriter::add_tensor_raw(const std::string& name, uint32_t ggml_type, const Shape& shape,
                                std::vector<uint8_t> bytes) {
  if (name.empty()) throw InvalidArgument("GgufWriter: empty tensor name");
  if (impl_->tensor_index.count(name) != 0)
    throw InvalidArgument(cat("GgufWriter: tensor '", name, "' added twice"));
  int64_t block_elems = 0, block_bytes = 0;
  if (!ggml_type_layout(ggml_type, &block_elems, &block_bytes))
    throw InvalidArgument(cat("GgufWriter: tensor '", name, "': unknown ggml type ", ggml_type));
  if (shape.rank() < 1 || shape.rank() > 4)
    throw InvalidArgument(
        cat("GgufWriter: tensor '", name, "': rank ", shape.rank(), " (GGUF holds 1 to 4 dims)"));
  for (int64_t d : shape)
    if (d <= 0)
      throw InvalidArgument(cat("GgufWriter: tensor '", name, "': shape ", shape.to_string()));
  if (shape[-1] % block_elems != 0)
    throw InvalidArgument(cat("GgufWriter: tensor '", name, "': last dimension ", shape[-1],
                              " is not a multiple of ", ggml_type_name(ggml_type), "'s block ",
                              block_elems));
  const int64_t expect = shape.numel() / block_elems * block_bytes;
  if (static_cast<int64_t>(bytes.size()) != expect)
    throw InvalidArgument(cat("GgufWriter: tensor '", name, "': ", bytes.size(), " bytes for ",
                              ggml_type_name(ggml_type), " ", shape.to_string(), " (expected ",
                              expect, ")"));
  impl_->tensor_index.emplace(name, impl_->tensors.size());
  impl_->tensors.push_back({name, ggml_type, shape, std::move(bytes)});
}

void GgufWriter::set_alignment(uint32_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw InvalidArgument(cat("GgufWriter: alignment ", alignment, " is not a power of two"));
  impl_->alignment = alignment;
  if (alignment != 32 || impl_->kv_index.count("general.alignment") != 0)
    set_int("general.alignment", alignment, GgufType::kU32);
}

void GgufWriter::set_version(uint32_t version) {
  if (version != 2 && version != 3)
    throw InvalidArgument(cat("GgufWriter: version ", version, " (2 or 3)"));
  impl_->version = version;
}

std::vector<uint8_t> GgufWriter::to_bytes() const {
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  put<uint32_t>(out, impl_->version);
  put<uint64_t>(out, impl_->tensors.size());
  put<uint64_t>(out, impl_->kvs.size());
  for (const auto& kv : impl_->kvs) {
    put_string(out, kv.key);
    put<uint32_t>(out, static_cast<uint32_t>(kv.type));
    put_bytes(out, kv.payload.data(), kv.payload.size());
  }
  const uint64_t a = impl_->alignment;
  uint64_t offset = 0;
  std::vector<uint64_t> offsets;
  for (const auto& t : impl_->tensors) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.rank()));
    for (int d = t.shape.rank() - 1; d >= 0; --d) put<uint64_t>(out, t.shape[d]);
    put<uint32_t>(out, t.ggml_type);
    put<uint64_t>(out, offset);
    offsets.push_back(offset);
    offset = aligned_offset(offset + t.bytes.size(), a);
  }
  if (impl_->tensors.empty()) return out;
  const uint64_t data_start = aligned_offset(out.size(), a);
  out.resize(data_start, 0);
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    out.resize(data_start + offsets[i], 0);
    put_bytes(out, impl_->tensors[i].bytes.data(), impl_->tensors[i].bytes.size());
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  const std::vector<uint8_t> bytes = to_bytes();
  const std::string tmp = cat(path, ".tmp.", ::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) throw IoError(cat(path, ": cannot create ", tmp, ": ", std::strerror(errno)));
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw IoError(cat(path, ": writing ", bytes.size(), " bytes failed: ", std::strerror(err)));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    throw IoError(cat(path, ": rename from ", tmp, " failed: ", std::strerror(err)));
  }
}

}  // namespace tandem::llm
