// SPDX-License-Identifier: Apache-2.0
// Shape: up to kMaxRank dimensions (int64), stored inline. Also used for strides, counted in
// elements.
//
//   tandem::Shape s{2, 3, 4};
//   s.numel();            // 24
//   s.contiguous_strides(); // {12, 4, 1}
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem {

inline constexpr int kMaxRank = 8;

class TANDEM_API Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  // Negative indices count from the end (-1 is the last dimension). Throws InvalidArgument if out
  // of range.
  int64_t operator[](int i) const { return dims_[norm(i)]; }
  int64_t& operator[](int i) { return dims_[norm(i)]; }
  int64_t numel() const;
  bool empty() const { return numel() == 0; }
  // Normalises a possibly negative dimension index; throws InvalidArgument if out of range.
  int norm(int i) const;

  void push_back(int64_t d);
  Shape contiguous_strides() const;
  std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
  std::string to_string() const;  // "[2, 3, 4]"

  const int64_t* begin() const { return dims_.data(); }
  const int64_t* end() const { return dims_.data() + rank_; }

  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace tandem
