// SPDX-License-Identifier: Apache-2.0
// ggml tensor type ids: names, block geometry, and the mapping to tandem DTypes. The numbering is
// ggml's (ggml.h enum ggml_type); ids 4, 5 and 31-33, 36-38 were removed there and stay unknown.
#include <array>

#include "tandem/core/error.h"
#include "tandem/llm/gguf.h"

namespace tandem::llm {

namespace {

struct TypeLayout {
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

// ggml's type ids (ggml.h); nullptr names mark ids that were removed or never assigned.
constexpr std::array<TypeLayout, 40> kTypes = {{
    {"F32", 1, 4},        {"F16", 1, 2},       {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
    {"Q8_0", 32, 34},     {"Q8_1", 32, 36},    {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
    {"Q4_K", 256, 144},   {"Q5_K", 256, 176},  {"Q6_K", 256, 210},   {"Q8_K", 256, 292},
    {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74}, {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
    {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110}, {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136},
    {"I8", 1, 1},         {"I16", 1, 2},       {"I32", 1, 4},        {"I64", 1, 8},
    {"F64", 1, 8},        {"IQ1_M", 256, 56},  {"BF16", 1, 2},       {nullptr, 0, 0},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {"TQ1_0", 256, 54},   {"TQ2_0", 256, 66},
    {nullptr, 0, 0},      {nullptr, 0, 0},     {nullptr, 0, 0},      {"MXFP4", 32, 17},
}};

const TypeLayout* layout_of(uint32_t t) {
  if (t >= kTypes.size() || kTypes[t].name == nullptr) return nullptr;
  return &kTypes[t];
}

}  // namespace

DType dtype_from_ggml_type(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0:
      return DType::kF32;
    case 1:
      return DType::kF16;
    case 2:
      return DType::kQ4_0;
    case 3:
      return DType::kQ4_1;
    case 8:
      return DType::kQ8_0;
    case 12:
      return DType::kQ4_K;
    case 14:
      return DType::kQ6_K;
    case 24:
      return DType::kI8;
    case 26:
      return DType::kI32;
    case 30:
      return DType::kBF16;
    default:
      throw Unsupported(cat("ggml type ", ggml_type_name(ggml_type), " has no tandem dtype"));
  }
}

uint32_t ggml_type_from_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 8;
    case DType::kQ4_K:
      return 12;
    case DType::kQ6_K:
      return 14;
    case DType::kI8:
      return 24;
    case DType::kI32:
      return 26;
    case DType::kBF16:
      return 30;
    default:
      throw Unsupported(cat("dtype ", dtype_name(dtype), " has no GGUF tensor type"));
  }
}

std::string ggml_type_name(uint32_t ggml_type) {
  const TypeLayout* lay = layout_of(ggml_type);
  return lay != nullptr ? std::string(lay->name) : cat("type ", ggml_type);
}

bool ggml_type_layout(uint32_t ggml_type, int64_t* block_elems, int64_t* block_bytes) {
  const TypeLayout* lay = layout_of(ggml_type);
  if (lay == nullptr) return false;
  if (block_elems != nullptr) *block_elems = lay->block_elems;
  if (block_bytes != nullptr) *block_bytes = lay->block_bytes;
  return true;
}

std::string gguf_type_name(GgufType type) {
  static constexpr std::array<const char*, 13> kNames = {"u8",  "i8",  "u16",  "i16",    "u32",
                                                         "i32", "f32", "bool", "string", "array",
                                                         "u64", "i64", "f64"};
  const auto i = static_cast<uint32_t>(type);
  return i < kNames.size() ? kNames[i] : cat("type ", i);
}

}  // namespace tandem::llm
