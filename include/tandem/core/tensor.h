// SPDX-License-Identifier: Apache-2.0
// Tensor: an owning view = shared Buffer + byte offset + shape + strides (in elements) + dtype.
// Views (slice, reshape of contiguous tensors, transpose, permute) share the buffer and never copy;
// contiguous() and to() copy. Block-quantized dtypes (see dtype.h) keep the last dimension
// contiguous.
//
//   auto x = tandem::Tensor::empty({4, 8}, tandem::DType::kF32);          // on the CPU
//   auto rows = x.slice(0, 1, 3);                                          // [2, 8] view
//   auto t = x.transpose(0, 1).contiguous();                                // [8, 4] copy
//   auto g = x.to(tandem::Device::cuda(0));                                 // copy to a GPU
//   float* p = x.data<float>();
//
// Thread-safety: a Tensor is a value; distinct Tensors may be used from distinct threads. Writing
// the same memory from two threads is a data race, as for any buffer.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/shape.h"
#include "tandem/export.h"

namespace tandem {

class Allocator;
class Stream;

// A contiguous allocation on one device. Frees itself through its allocator, or through a
// caller-supplied deleter when it wraps external memory (an mmap'd model file, a pinned host
// block).
class TANDEM_API Buffer {
 public:
  Buffer(Device device, size_t bytes, size_t alignment = 64);  // allocates via allocator(device)
  // Wraps memory owned elsewhere; `release` (may be empty) runs when the last reference goes.
  Buffer(Device device, void* data, size_t bytes, std::function<void(void*)> release);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device device() const { return device_; }
  void* data() const { return data_; }
  size_t size_bytes() const { return bytes_; }

 private:
  Device device_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Allocator* allocator_ = nullptr;
  std::function<void(void*)> release_;
};

class TANDEM_API Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false

  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu());
  // Wraps external memory without copying. `keep_alive` (may be null) is held as long as the tensor
  // lives.
  static Tensor from_blob(void* data, const Shape& shape, DType dtype,
                          Device device = Device::cpu(),
                          std::shared_ptr<void> keep_alive = nullptr);
  // CPU tensor from host values (copies); T must match dtype's storage (float, uint16_t, int8_t,
  // int32_t...).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, DType dtype);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return shape_.rank(); }
  int64_t size(int dim) const { return shape_[dim]; }
  int64_t stride(int dim) const { return strides_[dim]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool is_contiguous() const;
  // Bytes spanned by the elements when contiguous (dtype_row_bytes of numel).
  int64_t nbytes() const;

  // Raw pointer to the first element (host or device address).
  void* raw_data() const;
  // Typed host-side pointer; checks that sizeof(T) matches the dtype's storage unit.
  template <class T>
  T* data() const {
    TANDEM_CHECK(sizeof(T) == static_cast<size_t>(dtype_block_bytes(dtype_)) &&
                 !dtype_is_blocked(dtype_))
        << "data<T>() with sizeof(T)=" << sizeof(T) << " on a " << dtype_name(dtype_) << " tensor";
    return static_cast<T*>(raw_data());
  }

  // Views (no copy).
  Tensor slice(int dim, int64_t start, int64_t end) const;  // [start, end) along dim
  Tensor select(int dim, int64_t index) const;              // removes dim
  Tensor reshape(const Shape& shape) const;                 // requires is_contiguous()
  Tensor reshape(
      std::initializer_list<int64_t> dims) const;  // as above; one dim may be -1 (inferred)
  Tensor transpose(int d0, int d1) const;
  Tensor permute(const std::vector<int>& order) const;
  Tensor unsqueeze(int dim) const;

  // Copies.
  Tensor contiguous() const;  // returns *this when already contiguous
  Tensor clone() const;       // always a fresh contiguous copy
  Tensor to(Device device, Stream* stream = nullptr) const;
  // Copies src into this tensor (same shape and dtype; any devices; strided CPU copies allowed).
  void copy_from(const Tensor& src, Stream* stream = nullptr);
  // Host vector of the values converted to float (any dtype, any device; synchronous).
  std::vector<float> to_float_vector() const;

  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }
  int64_t offset_bytes() const { return offset_; }
  std::string to_string() const;  // "Tensor(f32, [4, 8], cpu)"

 private:
  std::shared_ptr<Buffer> buffer_;
  int64_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::kF32;
  int64_t element_offset_bytes(int dim, int64_t index) const;
};

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  TANDEM_CHECK(static_cast<int64_t>(values.size() * sizeof(T)) == t.nbytes())
      << "from_vector: " << values.size() << " values of " << sizeof(T) << " bytes for "
      << t.to_string();
  std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

}  // namespace tandem
