// SPDX-License-Identifier: Apache-2.0
// Whole-graph CNN runners on accelerators, supplied by backend modules.
//
// Why: libtandem never links CUDA libraries; the CUDA module (libtandem_cuda.so, dlopened by the
// backend registry) carries the cuDNN/cuBLAS implementation. When the module loads, it registers
// a factory here for its device type, and cnn::Executor with ExecutorOptions::device on that type
// builds its runner through it.
//
// How: a runner plans once for the graph (device buffers, uploaded weights, library handles) and
// run() executes many times. Inputs may live on the CPU or on the runner's device; outputs come
// back as CPU tensors.
//
//   cnn::Executor ex(graph, {.device = Device::cuda(0)});   // loads the CUDA module if needed
//   Tensor logits = ex.run({image})[0];                     // on the CPU
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tandem/cnn/graph.h"
#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/export.h"

namespace tandem::cnn {

class DeviceRunner {
 public:
  virtual ~DeviceRunner() = default;
  // One tensor per graph input (f32, the graph's shapes); returns the graph outputs on the CPU.
  virtual std::vector<Tensor> run(const std::vector<Tensor>& inputs) = 0;
  // One line: the device and the libraries used ("cuda:0 cuDNN 91900 ...").
  virtual std::string describe() const = 0;
};

using DeviceRunnerFactory = std::unique_ptr<DeviceRunner> (*)(const Graph& graph, Device device);

// Registers (or replaces) the factory for a device type; called by backend modules when loaded.
TANDEM_API void register_device_runner(DeviceType type, DeviceRunnerFactory factory);
// The factory for a device type after loading the backend modules, or nullptr.
TANDEM_API DeviceRunnerFactory find_device_runner(DeviceType type);

}  // namespace tandem::cnn
