// SPDX-License-Identifier: Apache-2.0
// Uses the installed library: a tensor, a GEMM on the CPU, the allocator's accounting. Exit code 0
// = pass.
#include <tandem/core/allocator.h>
#include <tandem/core/backend.h>
#include <tandem/ops/ops.h>
#include <tandem/version.h>

#include <cmath>
#include <cstdio>

int main() {
  using namespace tandem;
  const auto before = memory_stats(Device::cpu()).current_bytes;
  auto a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32);
  auto b = Tensor::from_vector(std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2}, DType::kF32);
  auto c = Tensor::empty({2, 2}, DType::kF32);
  ops::gemm(a, b, c);
  const float* p = c.data<float>();
  const float expect[4] = {4, 5, 10, 11};
  for (int i = 0; i < 4; ++i) {
    if (std::fabs(p[i] - expect[i]) > 1e-5f) {
      std::fprintf(stderr, "c[%d] = %f, expected %f\n", i, p[i], expect[i]);
      return 1;
    }
  }
  const auto live = memory_stats(Device::cpu()).current_bytes - before;
  if (live != 24 + 24 + 16) {
    std::fprintf(stderr, "allocator counts %lld live bytes, expected 64\n",
                 static_cast<long long>(live));
    return 1;
  }
  std::printf("tandem %s consumer ok: %zu device(s)\n", TANDEM_VERSION_STRING,
              BackendRegistry::global().devices().size());
  return 0;
}
