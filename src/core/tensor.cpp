// SPDX-License-Identifier: Apache-2.0
#include "tandem/core/tensor.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/allocator.h"
#include "tandem/core/backend.h"
#include "tandem/ops/ops.h"

namespace tandem {

// ----------------------------------------------------------------------------------------------
// Buffer

Buffer::Buffer(Device device, size_t bytes, size_t alignment) : device_(device), bytes_(bytes) {
  allocator_ = &allocator(device);
  data_ = allocator_->allocate(bytes, alignment);
}

Buffer::Buffer(Device device, void* data, size_t bytes, std::function<void(void*)> release)
    : device_(device), data_(data), bytes_(bytes), release_(std::move(release)) {}

Buffer::~Buffer() {
  if (allocator_) {
    allocator_->deallocate(data_, bytes_);
  } else if (release_) {
    release_(data_);
  }
}

// ----------------------------------------------------------------------------------------------
// Tensor

namespace {

void check_blocked_shape(const Shape& shape, DType dtype) {
  if (!dtype_is_blocked(dtype)) return;
  if (shape.rank() == 0)
    throw InvalidArgument(cat("a ", dtype_name(dtype), " tensor needs at least one dimension"));
  if (shape[-1] % dtype_block_size(dtype) != 0)
    throw InvalidArgument(cat("last dimension ", shape[-1], " of a ", dtype_name(dtype),
                              " tensor must be a multiple of ", dtype_block_size(dtype)));
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_blocked_shape(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  t.buffer_ =
      std::make_shared<Buffer>(device, static_cast<size_t>(dtype_row_bytes(dtype, shape.numel())));
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (device.is_cpu()) {
    std::memset(t.raw_data(), 0, static_cast<size_t>(t.nbytes()));
  } else {
    Tensor host = empty(shape, dtype);
    std::memset(host.raw_data(), 0, static_cast<size_t>(host.nbytes()));
    t.copy_from(host);
  }
  return t;
}

Tensor Tensor::from_blob(void* data, const Shape& shape, DType dtype, Device device,
                         std::shared_ptr<void> keep_alive) {
  check_blocked_shape(shape, dtype);
  Tensor t;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  t.dtype_ = dtype;
  const auto bytes = static_cast<size_t>(dtype_row_bytes(dtype, shape.numel()));
  t.buffer_ =
      std::make_shared<Buffer>(device, data, bytes, [keep = std::move(keep_alive)](void*) {});
  return t;
}

Device Tensor::device() const { return buffer_ ? buffer_->device() : Device::cpu(); }

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expect) return false;
    expect *= shape_[i];
  }
  return true;
}

int64_t Tensor::nbytes() const { return dtype_row_bytes(dtype_, numel()); }

void* Tensor::raw_data() const {
  TANDEM_CHECK(buffer_) << "raw_data() of an undefined tensor";
  return static_cast<char*>(buffer_->data()) + offset_;
}

int64_t Tensor::element_offset_bytes(int dim, int64_t index) const {
  const int64_t elems = strides_[dim] * index;
  const int64_t block = dtype_block_size(dtype_);
  if (elems % block != 0)
    throw InvalidArgument(cat("view of a ", dtype_name(dtype_),
                              " tensor must start on a block boundary (", block, " elements)"));
  return elems / block * dtype_block_bytes(dtype_);
}

Tensor Tensor::slice(int dim, int64_t start, int64_t end) const {
  const int d = shape_.norm(dim);
  if (start < 0 || end < start || end > shape_[d])
    throw InvalidArgument(
        cat("slice [", start, ", ", end, ") out of range for dim ", d, " of ", to_string()));
  Tensor t = *this;
  if (dtype_is_blocked(dtype_) && d == rank() - 1 &&
      ((end - start) % dtype_block_size(dtype_) != 0))
    throw InvalidArgument(cat("slice of the last dimension of a ", dtype_name(dtype_),
                              " tensor must cover whole blocks"));
  t.offset_ += element_offset_bytes(d, start);
  t.shape_[d] = end - start;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = shape_.norm(dim);
  if (index < 0 || index >= shape_[d])
    throw InvalidArgument(
        cat("select index ", index, " out of range for dim ", d, " of ", to_string()));
  if (dtype_is_blocked(dtype_) && d == rank() - 1)
    throw InvalidArgument(
        cat("cannot select within the last dimension of a ", dtype_name(dtype_), " tensor"));
  Tensor t = *this;
  t.offset_ += element_offset_bytes(d, index);
  Shape s, st;
  for (int i = 0; i < rank(); ++i) {
    if (i == d) continue;
    s.push_back(shape_[i]);
    st.push_back(strides_[i]);
  }
  t.shape_ = s;
  t.strides_ = st;
  return t;
}

Tensor Tensor::reshape(std::initializer_list<int64_t> dims) const {
  int infer = -1;
  int64_t known = 1;
  std::vector<int64_t> d(dims);
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == -1) {
      if (infer >= 0) throw InvalidArgument("reshape: at most one -1 dimension");
      infer = static_cast<int>(i);
    } else {
      if (d[i] < 0) throw InvalidArgument(cat("reshape: negative dimension ", d[i]));
      known *= d[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel() % known != 0)
      throw InvalidArgument(
          cat("reshape ", shape_.to_string(), ": cannot infer -1 from ", numel(), " elements"));
    d[infer] = numel() / known;
  }
  return reshape(Shape(d));
}

Tensor Tensor::reshape(const Shape& shape) const {
  if (!is_contiguous())
    throw InvalidArgument(cat("reshape of a non-contiguous tensor ", to_string()));
  if (shape.numel() != numel())
    throw InvalidArgument(cat("reshape ", shape_.to_string(), " to ", shape.to_string()));
  check_blocked_shape(shape, dtype_);
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = shape.contiguous_strides();
  return t;
}

Tensor Tensor::transpose(int d0, int d1) const {
  std::vector<int> order(rank());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[shape_.norm(d0)], order[shape_.norm(d1)]);
  return permute(order);
}

Tensor Tensor::permute(const std::vector<int>& order) const {
  if (static_cast<int>(order.size()) != rank())
    throw InvalidArgument(cat("permute: ", order.size(), " axes for rank ", rank()));
  std::vector<bool> seen(rank(), false);
  Tensor t = *this;
  Shape s, st;
  for (int i : order) {
    const int d = shape_.norm(i);
    if (seen[d]) throw InvalidArgument(cat("permute: axis ", i, " repeated"));
    seen[d] = true;
    s.push_back(shape_[d]);
    st.push_back(strides_[d]);
  }
  if (dtype_is_blocked(dtype_) && order.back() != rank() - 1 &&
      shape_.norm(order.back()) != rank() - 1)
    throw InvalidArgument(
        cat("permute must keep the last dimension of a ", dtype_name(dtype_), " tensor"));
  t.shape_ = s;
  t.strides_ = st;
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  const int d = dim < 0 ? dim + rank() + 1 : dim;
  if (d < 0 || d > rank()) throw InvalidArgument(cat("unsqueeze: dim ", dim, " for rank ", rank()));
  Shape s, st;
  for (int i = 0; i <= rank(); ++i) {
    if (i == d) {
      s.push_back(1);
      st.push_back(i < rank() ? strides_[i] * shape_[i] : 1);
    }
    if (i < rank()) {
      s.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  }
  Tensor t = *this;
  t.shape_ = s;
  t.strides_ = st;
  return t;
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device());
  // convert() accepts a strided source and a contiguous destination of the same dtype: a strided
  // copy.
  BackendRegistry::global().get(device()).kernels().convert(*this, out, nullptr);
  return out;
}

Tensor Tensor::to(Device device, Stream* stream) const {
  Tensor out = empty(shape_, dtype_, device);
  out.copy_from(*this, stream);
  return out;
}

void Tensor::copy_from(const Tensor& src, Stream* stream) {
  if (!(src.shape() == shape_) || src.dtype() != dtype_)
    throw InvalidArgument(cat("copy_from: ", src.to_string(), " into ", to_string()));
  if (numel() == 0) return;
  auto& reg = BackendRegistry::global();
  if (is_contiguous()) {
    Tensor s = src.contiguous();
    Backend& b = !device().is_cpu() ? reg.get(device()) : reg.get(s.device());
    b.copy(s, *this, stream);
    return;
  }
  if (!device().is_cpu())
    throw Unsupported(cat("copy into a non-contiguous ", device().to_string(), " tensor"));
  // Strided CPU destination: gather the source to a contiguous host tensor, then scatter.
  Tensor host = src.device().is_cpu() ? src : src.to(Device::cpu(), stream);
  if (stream) stream->synchronize();
  Tensor dense = host.contiguous();
  // convert() writes contiguous outputs only, so scatter row by row here.
  const int r = rank();
  const int64_t unit = dtype_block_bytes(dtype_), block = dtype_block_size(dtype_);
  const int64_t inner = r ? shape_[r - 1] : 1;
  const bool inner_dense = r == 0 || strides_[r - 1] == 1;
  const int64_t outer = inner ? numel() / std::max<int64_t>(inner, 1) : 0;
  const char* sp = static_cast<const char*>(dense.raw_data());
  std::vector<int64_t> idx(std::max(r - 1, 0), 0);
  for (int64_t row = 0; row < outer; ++row) {
    int64_t off = 0;
    for (int i = 0; i < r - 1; ++i) off += idx[i] * strides_[i];
    char* dp = static_cast<char*>(raw_data());
    if (inner_dense) {
      std::memcpy(dp + off / block * unit, sp + row * dtype_row_bytes(dtype_, inner),
                  static_cast<size_t>(dtype_row_bytes(dtype_, inner)));
    } else {
      if (block != 1) throw Unsupported("strided last dimension for a packed dtype");
      for (int64_t j = 0; j < inner; ++j)
        std::memcpy(dp + (off + j * strides_[r - 1]) * unit, sp + (row * inner + j) * unit,
                    static_cast<size_t>(unit));
    }
    for (int i = r - 2; i >= 0; --i) {
      if (++idx[i] < shape_[i]) break;
      idx[i] = 0;
    }
  }
}

std::vector<float> Tensor::to_float_vector() const {
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  Tensor f = empty(shape_, DType::kF32);
  ops::cpu_reference_kernels().convert(host, f, nullptr);
  const float* p = f.data<float>();
  return {p, p + f.numel()};
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  return cat("Tensor(", dtype_name(dtype_), ", ", shape_.to_string(), ", ", device().to_string(),
             ")");
}

}  // namespace tandem
