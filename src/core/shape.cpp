// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/shape.h"

#include "tandem/core/error.h"

namespace tandem {

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > kMaxRank)
    throw InvalidArgument(cat("Shape: rank ", dims.size(), " > ", kMaxRank));
  for (int64_t d : dims) push_back(d);
}

Shape::Shape(const std::vector<int64_t>& dims) {
  if (dims.size() > kMaxRank)
    throw InvalidArgument(cat("Shape: rank ", dims.size(), " > ", kMaxRank));
  for (int64_t d : dims) push_back(d);
}

int Shape::norm(int i) const {
  const int j = i < 0 ? i + rank_ : i;
  if (j < 0 || j >= rank_)
    throw InvalidArgument(cat("dimension ", i, " out of range for rank ", rank_));
  return j;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(int64_t d) {
  if (rank_ >= kMaxRank) throw InvalidArgument(cat("Shape: rank would exceed ", kMaxRank));
  if (d < 0) throw InvalidArgument(cat("Shape: negative dimension ", d));
  dims_[rank_++] = d;
}

Shape Shape::contiguous_strides() const {
  Shape s = *this;
  int64_t acc = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    s.dims_[i] = acc;
    acc *= dims_[i];
  }
  return s;
}

std::string Shape::to_string() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace tandem
