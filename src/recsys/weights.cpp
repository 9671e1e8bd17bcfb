// SPDX-License-Identifier: Apache-2.0
// Counter-based weight generator and the safetensors reader/writer of recsys weight files.
#include "tandem/recsys/weights.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/core/json.h"

namespace tandem::rec {

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t fnv1a64(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t tensor_seed(uint64_t model_seed, const std::string& name) {
  return fnv1a64(name) ^ (model_seed * 0x9e3779b97f4a7c15ull);
}

Tensor generate_tensor(const Shape& shape, uint64_t model_seed, const std::string& name,
                       float scale, float offset) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  const GeneratedTensor g{tensor_seed(model_seed, name), scale, offset};
  float* p = t.data<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) p[i] = g.at(static_cast<uint64_t>(i));
  return t;
}

namespace {

int64_t dtype_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "U8" || dtype == "I8") return 1;
  if (dtype == "F64" || dtype == "I64") return 8;
  return 0;
}

}  // namespace

void write_safetensors(const std::string& path, const SafetensorsFile& file) {
  nlohmann::json header = nlohmann::json::object();
  if (!file.metadata.empty()) header["__metadata__"] = file.metadata;
  // Order: wider dtypes first so every tensor starts at a multiple of its element size.
  std::vector<const std::pair<const std::string, StoredTensor>*> order;
  for (const auto& kv : file.tensors) order.push_back(&kv);
  std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return dtype_bytes(a->second.dtype) > dtype_bytes(b->second.dtype);
  });
  uint64_t offset = 0;
  for (const auto* kv : order) {
    const auto& t = kv->second;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const int64_t eb = dtype_bytes(t.dtype);
    if (eb == 0)
      throw InvalidArgument(
          cat("write_safetensors: tensor '", kv->first, "' has unsupported dtype '", t.dtype, "'"));
    if (static_cast<int64_t>(t.data.size()) != n * eb)
      throw InvalidArgument(cat("write_safetensors: tensor '", kv->first, "' has ", t.data.size(),
                                " bytes for ", n, " elements of ", t.dtype));
    header[kv->first] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // data starts 8-byte aligned
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw IoError(cat("cannot create '", path, "': ", std::strerror(errno)));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
  f.write(reinterpret_cast<const char*>(len), 8);
  f.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto* kv : order)
    f.write(reinterpret_cast<const char*>(kv->second.data.data()),
            static_cast<std::streamsize>(kv->second.data.size()));
  f.close();
  if (!f) throw IoError(cat("error writing '", path, "'"));
}

SafetensorsFile read_safetensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw IoError(cat("cannot open '", path, "': ", std::strerror(errno)));
  const int64_t size = static_cast<int64_t>(f.tellg());
  f.seekg(0);
  if (size < 8)
    throw ParseError(path, 0, cat("file of ", size, " bytes is too short for a header"));
  uint8_t len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  if (n > uint64_t(size - 8) || n > (uint64_t{100} << 20))
    throw ParseError(path, 0, cat("header length ", n, " exceeds the file (", size, " bytes)"));
  std::string text(n, '\0');
  f.read(text.data(), static_cast<std::streamsize>(n));
  if (!f) throw IoError(cat("error reading '", path, "'"));
  const nlohmann::json header = parse_json(text, path, 8);
  if (!header.is_object()) throw ParseError(path, 8, "header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_size = size - data_start;
  SafetensorsFile out;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw ParseError(path, 8, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m->is_string())
          throw ParseError(path, 8, cat("__metadata__.", m.key(), " is not a string"));
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return ParseError(path, 8, cat("tensor '", name, "': ", what));
    };
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      throw bad("needs dtype, shape and data_offsets");
    if (!v["dtype"].is_string()) throw bad("dtype is not a string");
    StoredTensor t;
    t.dtype = v["dtype"].get<std::string>();
    const int64_t eb = dtype_bytes(t.dtype);
    if (eb == 0) throw bad(cat("unsupported dtype '", t.dtype, "'"));
    if (!v["shape"].is_array()) throw bad("shape is not an array");
    int64_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) throw bad("shape holds a non-integer or negative dimension");
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim && uint64_t(count) > (uint64_t{1} << 50) / dim))
        throw bad("shape too large");
      t.shape.push_back(static_cast<int64_t>(dim));
      count *= static_cast<int64_t>(dim);
    }
    const auto& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw bad("data_offsets must be two non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e || e > uint64_t(data_size))
      throw bad(
          cat("data_offsets [", b, ", ", e, "] outside the data section of ", data_size, " bytes"));
    if (int64_t(e - b) != count * eb)
      throw bad(cat("holds ", e - b, " bytes but ", t.dtype, " ", v["shape"].dump(), " needs ",
                    count * eb));
    ranges.emplace_back(static_cast<int64_t>(b), static_cast<int64_t>(e));
    t.data.resize(e - b);
    f.seekg(data_start + static_cast<int64_t>(b));
    f.read(reinterpret_cast<char*>(t.data.data()), static_cast<std::streamsize>(e - b));
    if (!f) throw IoError(cat("error reading tensor '", name, "' of '", path, "'"));
    out.tensors.emplace(name, std::move(t));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw ParseError(path, data_start + ranges[i].first, "tensor data ranges overlap");
  return out;
}

}  // namespace tandem::rec
