// SPDX-License-Identifier: Apache-2.0
// The CUDA module loads through the registry everywhere, links no driver library, and on machines
// without a usable GPU reports zero devices with a reason (while CUDA device requests fail with
// NotFound, not a crash).
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/gpu.h"
#include "tandem/core/backend.h"
#include "tandem/core/tensor.h"

namespace tandem {
namespace {

// DT_NEEDED entries of a 64-bit little-endian ELF shared object.
std::vector<std::string> needed_libraries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  if (data.size() < sizeof(Elf64_Ehdr)) return out;
  Elf64_Ehdr eh;
  std::memcpy(&eh, data.data(), sizeof eh);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64)
    return out;
  auto section = [&](int i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, data.data() + eh.e_shoff + static_cast<size_t>(i) * eh.e_shentsize, sizeof sh);
    return sh;
  };
  for (int i = 0; i < eh.e_shnum; ++i) {
    const Elf64_Shdr dyn = section(i);
    if (dyn.sh_type != SHT_DYNAMIC) continue;
    const Elf64_Shdr str = section(static_cast<int>(dyn.sh_link));
    for (size_t off = 0; off + sizeof(Elf64_Dyn) <= dyn.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, data.data() + dyn.sh_offset + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag == DT_NEEDED) out.emplace_back(data.data() + str.sh_offset + d.d_un.d_val);
    }
  }
  return out;
}

TEST(CudaModule, LoadsThroughTheRegistry) {
  auto& reg = BackendRegistry::global();
  for (const auto& e : reg.load_errors()) ADD_FAILURE() << "module load error: " << e;
  Backend* cuda = reg.find(DeviceType::kCuda);
  ASSERT_NE(cuda, nullptr) << "libtandem_cuda.so was built but not loaded";
  EXPECT_EQ(cuda->name(), "cuda");
  EXPECT_EQ(cuda->type(), DeviceType::kCuda);
  EXPECT_GE(cuda->device_count(), 0);
  if (cuda->device_count() > 0) EXPECT_EQ(cuda->unavailable_reason(), "");
}

TEST(CudaModule, LinksNoDriverLibrary) {
  const auto needed = needed_libraries(TANDEM_CUDA_MODULE_PATH);
  ASSERT_FALSE(needed.empty()) << "could not read the dynamic section of "
                               << TANDEM_CUDA_MODULE_PATH;
  bool has_cublas = false;
  for (const auto& lib : needed) {
    EXPECT_NE(lib.rfind("libcuda.so", 0), 0u) << TANDEM_CUDA_MODULE_PATH << " needs " << lib;
    EXPECT_NE(lib.rfind("libcudart.so", 0), 0u)
        << "the runtime should be linked statically, found " << lib;
    has_cublas = has_cublas || lib.rfind("libcublas.so", 0) == 0;
  }
  EXPECT_TRUE(has_cublas);
}

TEST(CudaModule, WithoutDeviceReportsZeroAndWhy) {
  Backend* cuda = BackendRegistry::global().find(DeviceType::kCuda);
  ASSERT_NE(cuda, nullptr);
  if (cuda->device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present; this checks the no-device path";
  const std::string reason = cuda->unavailable_reason();
  EXPECT_EQ(reason.rfind("no usable CUDA device: ", 0), 0u) << reason;
  EXPECT_GT(reason.size(), std::strlen("no usable CUDA device: ")) << reason;
  for (const auto& d : BackendRegistry::global().devices()) EXPECT_TRUE(d.is_cpu());
  try {
    Tensor::empty({4}, DType::kF32, Device::cuda(0));
    ADD_FAILURE() << "allocating on cuda:0 without a device did not throw";
  } catch (const NotFound& e) {
    EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
  }
  EXPECT_THROW(create_stream(Device::cuda(0)), NotFound);
  EXPECT_THROW(cuda->device_info(0), NotFound);
  EXPECT_THROW(cuda->create_event(0), NotFound);
  std::string why;
  EXPECT_FALSE(testing::gpu_available(&why));
}

}  // namespace
}  // namespace tandem
