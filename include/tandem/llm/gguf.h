// SPDX-License-Identifier: Apache-2.0
// GGUF: the single-file model format of ggml/llama.cpp (versions 2 and 3). GgufFile memory-maps a
// file and exposes its metadata and tensors; GgufWriter writes small files (test fixtures,
// generated-weight models).
//
// Layout (little-endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count, kv_count typed
// key/value pairs, tensor_count tensor infos (name, n_dims, dims innermost-first, ggml type,
// offset), padding to general.alignment (default 32), then tensor data at the given offsets.
//
//   tandem::llm::GgufFile f("SmolLM2-135M-Instruct.Q4_1.gguf");
//   std::string arch = f.get_string("general.architecture");          // "llama"
//   int64_t n = f.get_int("llama.block_count");                         // 30
//   tandem::Tensor w = f.tensor("blk.0.attn_q.weight");                // q4_1 [576, 576],
//   zero-copy view
//
// Reading is bounds-checked: a truncated, corrupted or hostile file raises ParseError naming the
// field and byte offset ("x.gguf at byte 24: metadata key 3: string length 18446744073709551615
// exceeds the file"), never a crash or a huge allocation. Tensor shapes are reported
// outermost-first (tandem order: a GGUF weight with dims {K, N} becomes Shape{N, K}). Types other
// than F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, I8, I32 raise Unsupported when the tensor is
// requested (not when the file is opened); unknown type ids are a ParseError at open (their size
// cannot be known). A missing file raises NotFound, other I/O IoError. Tensors whose data is not
// naturally aligned (files with general.alignment < 4) are copied, not viewed. Thread-safety: a
// GgufFile is immutable after construction; tensors keep the mapping alive.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::llm {

// GGUF metadata value types (the file's numbering).
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

struct GgufTensorInfo {
  std::string name;
  Shape shape;  // outermost first
  uint32_t ggml_type =
      0;                // the file's type id (0 F32, 1 F16, 2 Q4_0, 3 Q4_1, 8 Q8_0, 30 BF16, ...)
  uint64_t offset = 0;  // relative to the start of the data section
  uint64_t nbytes = 0;
};

class TANDEM_API GgufFile {
 public:
  explicit GgufFile(const std::string& path);  // NotFound / IoError / ParseError
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const;
  const std::string& path() const;

  bool has(const std::string& key) const;
  GgufType type_of(const std::string& key) const;  // NotFound
  // Typed getters: NotFound when absent, ParseError when the stored type does not fit.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;   // any integer type (u64 > INT64_MAX: ParseError)
  double get_float(const std::string& key) const;  // f32/f64 (or integers)
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // Optional forms for keys that may be absent.
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;
  std::vector<std::string> keys() const;
  // All metadata as JSON (arrays longer than max_array elements are summarised as
  // {"array": "<element type>", "count": N, "first": [...]}) for `tandem inspect`. Strings are the
  // file's bytes: dump with error_handler_t::replace, since a file may hold invalid UTF-8.
  nlohmann::json metadata_json(size_t max_array = 16) const;
  // File geometry: byte offset of the tensor data section, the alignment in force, the file size.
  uint64_t data_offset() const;
  uint32_t alignment() const;
  uint64_t file_size() const;

  const std::vector<GgufTensorInfo>& tensors() const;
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  // A zero-copy CPU tensor over the mapped bytes (NotFound, Unsupported for other ggml types).
  Tensor tensor(const std::string& name) const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// ggml type id <-> tandem DType for the supported types (Unsupported for others).
TANDEM_API DType dtype_from_ggml_type(uint32_t ggml_type);
TANDEM_API uint32_t ggml_type_from_dtype(DType dtype);
TANDEM_API std::string ggml_type_name(uint32_t ggml_type);  // "Q4_K", "type 99" for unknown ids
// Block geometry of a known ggml type (elements and bytes per block, e.g. Q4_K: 256, 144); false
// for unknown ids.
TANDEM_API bool ggml_type_layout(uint32_t ggml_type, int64_t* block_elems, int64_t* block_bytes);
// GGUF metadata type name: "u8", "string", "array", ...
TANDEM_API std::string gguf_type_name(GgufType type);

// Builds a GGUF v3 file in memory and writes it. Tensors are given in tandem order (outermost
// first). Setting a key twice replaces its value (the first position is kept); a repeated tensor
// name is InvalidArgument. write() goes through a temporary file and a rename.
//
//   GgufWriter w;
//   w.set_string("general.architecture", "llama");
//   w.set_int("llama.block_count", 2, GgufType::kU32);
//   w.add_tensor("token_embd.weight", embedding);     // any supported dtype, CPU tensor
//   w.write("tiny.gguf");
class TANDEM_API GgufWriter {
 public:
  GgufWriter();
  ~GgufWriter();
  void set_string(const std::string& key, const std::string& value);
  void set_int(const std::string& key, int64_t value, GgufType type = GgufType::kI64);
  void set_float(const std::string& key, double value, GgufType type = GgufType::kF32);
  void set_bool(const std::string& key, bool value);
  void set_string_array(const std::string& key, const std::vector<std::string>& values);
  void set_int_array(const std::string& key, const std::vector<int64_t>& values,
                     GgufType type = GgufType::kI32);
  void set_float_array(const std::string& key, const std::vector<double>& values,
                       GgufType type = GgufType::kF32);
  // A value whose payload (the bytes after the u32 type) the caller encoded: nested arrays, u64
  // values above INT64_MAX, deliberately malformed test files.
  void set_raw(const std::string& key, GgufType type, std::vector<uint8_t> payload);
  void add_tensor(const std::string& name, const Tensor& tensor);
  // A tensor of any ggml type id given as raw bytes (Q4_K and other types tandem does not compute
  // with); `bytes` must match the type's block geometry. InvalidArgument otherwise.
  void add_tensor_raw(const std::string& name, uint32_t ggml_type, const Shape& shape,
                      std::vector<uint8_t> bytes);
  void set_alignment(uint32_t alignment);  // default 32; other values also write general.alignment
  void set_version(uint32_t version);      // 3 (default) or 2; the layouts are the same
  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;  // IoError

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::llm
