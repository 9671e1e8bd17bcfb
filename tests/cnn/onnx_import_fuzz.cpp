// SPDX-License-Identifier: Apache-2.0
// Fuzz target for the ONNX importer: the bytes are parsed as a ModelProto and imported; a graph
// that imports and is small enough is also run once on a fixed input. Any input must either work
// or raise a tandem::Error; anything else (another exception, a crash, a sanitizer report) is a
// bug. Built as a libFuzzer binary with clang (scripts/fuzz.sh onnx_import) and, everywhere, as a
// replay test over tests/fuzz/corpus/onnx.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tandem/cnn/executor.h"
#include "tandem/cnn/onnx_import.h"
#include "tandem/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tandem;
  try {
    const cnn::Graph g = cnn::import_onnx_bytes(data, size, "fuzz.onnx");
    int64_t elems = 0;
    for (const cnn::TensorInfo& t : g.tensors()) elems += t.shape.numel();
    if (elems > (int64_t{1} << 20) || g.total_flops() > (int64_t{1} << 26)) return 0;
    std::vector<Tensor> inputs;
    for (int t : g.inputs()) {
      Tensor x = Tensor::empty(g.tensor(t).shape, DType::kF32);
      float* p = x.data<float>();
      for (int64_t i = 0; i < x.numel(); ++i) p[i] = static_cast<float>(i % 7) - 3.0f;
      inputs.push_back(x);
    }
    cnn::Executor ex(g);
    (void)ex.run(inputs);
  } catch (const tandem::Error&) {
    // expected for malformed or unsupported inputs
  }
  return 0;
}
