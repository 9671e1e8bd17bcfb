// SPDX-License-Identifier: Apache-2.0
// Decoding of ONNX TensorProto initializers into tandem Tensors (internal to the importer).
#pragma once

#include <filesystem>
#include <string>

#include "tandem/core/tensor.h"

namespace onnx {
class TensorProto;
}

namespace tandem::cnn {

// What a decoded constant holds: float data (f32 tensor) or integers (i64 tensor).
enum class DecodedType { kFloat, kInt64 };

struct TensorSource {
  std::string source;         // the model's name, for messages
  std::filesystem::path dir;  // where external data files live; empty: external data rejected
};

// Decodes float/double/float16 (to f32) and int64/int32 (to i64) tensors from the typed fields,
// raw_data (little-endian) or external data. Throws ParseError naming the tensor when the data
// does not match the dims, Unsupported for other element types.
Tensor decode_tensor(const onnx::TensorProto& t, const TensorSource& src, DecodedType* type);

}  // namespace tandem::cnn
