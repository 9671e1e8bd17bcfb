// SPDX-License-Identifier: Apache-2.0
// Generated weights and the weight file of recommendation models.
//
// Weights are generated, not trained: element i of the tensor called `name` in a model with seed s
// is
//     u   = (splitmix64(tensor_seed + i) >> 40) * 2^-24          in [0, 1)
//     w_i = offset + scale * (2u - 1)
// with tensor_seed = fnv1a64(name) ^ (s * 0x9e3779b97f4a7c15) and splitmix64(z) the finaliser of
// Steele et al.'s SplitMix64 applied to z + 0x9e3779b97f4a7c15. The rule is counter based, so any
// element (an embedding row of a 4M-row table) can be produced independently and in parallel, and
// the numpy reference (scripts/recsys/reference.py) regenerates the same numbers.
//
// Weight files are safetensors (8-byte little-endian header length, JSON header, raw data): dense
// weights F32, tables F32, F16 or U8 (row-wise int8: per row `dim` uint8 codes, then f32 scale and
// f32 bias; the table's header metadata "tandem.table.<name>" says "i8_rowwise"). The metadata
// also holds the model config, so a file says which model it belongs to.
//
//   tandem::rec::GeneratedTensor g{tandem::rec::tensor_seed(42, "top.0.weight"), 0.1f};
//   float w = g.at(17);
//
// Thread-safety: the functions are pure; files are written and read by one thread each.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::rec {

TANDEM_API uint64_t splitmix64(uint64_t z);
TANDEM_API uint64_t fnv1a64(const std::string& text);
TANDEM_API uint64_t tensor_seed(uint64_t model_seed, const std::string& name);

struct GeneratedTensor {
  uint64_t seed = 0;  // tensor_seed(model seed, name)
  float scale = 1.0f;
  float offset = 0.0f;
  float at(uint64_t i) const {
    const double u = static_cast<double>(splitmix64(seed + i) >> 40) * (1.0 / 16777216.0);
    return static_cast<float>(offset + scale * (2.0 * u - 1.0));
  }
};

// A tensor of the given shape filled by the rule above.
TANDEM_API Tensor generate_tensor(const Shape& shape, uint64_t model_seed, const std::string& name,
                                  float scale, float offset = 0.0f);

// One tensor of a safetensors file as read: its dtype name ("F32", "F16", "U8"), shape and bytes.
struct StoredTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  std::map<std::string, StoredTensor> tensors;
};

// Writes `file` to `path` (tensors in name order). Throws IoError naming the path.
TANDEM_API void write_safetensors(const std::string& path, const SafetensorsFile& file);
// Reads a whole safetensors file with bounds checks: ParseError naming the path, the byte offset
// and the tensor for a truncated file, a bad header, overlapping or out-of-range data offsets, a
// size that does not match dtype x shape; IoError when the file cannot be read.
TANDEM_API SafetensorsFile read_safetensors(const std::string& path);

}  // namespace tandem::rec
