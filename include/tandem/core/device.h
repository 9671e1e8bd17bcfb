// SPDX-License-Identifier: Apache-2.0
// Device: where a tensor lives and an op runs. Written "cpu" or "cuda:N".
//
//   auto d = tandem::Device::parse("cuda:1");   // {kCuda, 1}
//   d.to_string();                               // "cuda:1"
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tandem/export.h"

namespace tandem {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct TANDEM_API Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static Device cpu() { return {DeviceType::kCpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCuda, index}; }
  // Accepts "cpu", "cpu:0", "cuda" (= cuda:0), "cuda:N"; throws InvalidArgument otherwise.
  static Device parse(std::string_view text);
  std::string to_string() const;
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }

  friend bool operator==(const Device&, const Device&) = default;
};

TANDEM_API std::string_view device_type_name(DeviceType t);  // "cpu", "cuda"

}  // namespace tandem
