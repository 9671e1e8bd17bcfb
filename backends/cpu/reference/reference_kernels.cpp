// SPDX-License-Identifier: Apache-2.0
// The reference OpKernels table: synchronizes the given stream (if any), then runs the plain loops
// of reference.h on the calling thread.
#include "../cpu_kernels.h"
#include "reference.h"

namespace tandem::cpu {
namespace {

void sync(Stream* s) {
  if (s) s->synchronize();
}

class ReferenceKernels final : public ops::OpKernels {
 public:
  void gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
            Stream* s) override {
    sync(s);
    ref::gemm(a, b, c, p);
  }
  void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
                    Stream* s) override {
    sync(s);
    ref::batched_gemm(a, b, c, p);
  }
  void softmax(const Tensor& x, Tensor& y, Stream* s) override {
    sync(s);
    ref::softmax(x, y);
  }
  void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const ops::NormParams& p,
                Stream* s) override {
    sync(s);
    ref::rms_norm(x, w, y, p);
  }
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                  const ops::NormParams& p, Stream* s) override {
    sync(s);
    ref::layer_norm(x, w, b, y, p);
  }
  void rope(const Tensor& x, const Tensor& pos, Tensor& y, const ops::RopeParams& p,
            Stream* s) override {
    sync(s);
    ref::rope(x, pos, y, p);
  }
  void unary(ops::UnaryOp op, const Tensor& x, Tensor& y, Stream* s) override {
    sync(s);
    ref::unary(op, x, y);
  }
  void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y, Stream* s) override {
    sync(s);
    ref::binary(op, a, b, y);
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s) override {
    sync(s);
    ref::embedding(table, ids, out);
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const ops::AttentionParams& p, Tensor* probs, Stream* s) override {
    sync(s);
    ref::attention(q, k, v, out, p, probs);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
              const ops::Conv2dParams& p, Stream* s) override {
    sync(s);
    ref::conv2d(x, w, bias, y, p);
  }
  void convert(const Tensor& src, Tensor& dst, Stream* s) override {
    sync(s);
    ref::convert(src, dst);
  }
  void paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                       const ops::PagedKv& kv, Tensor& out, float scale, Stream* s) override {
    sync(s);
    ref::paged_attention(q, q_positions, kv, out, scale);
  }
  void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                     ops::BagMode mode, Stream* s) override {
    sync(s);
    ref::embedding_bag(table, indices, offsets, out, mode);
  }
};

}  // namespace

ops::OpKernels& reference_kernels() {
  static ReferenceKernels kernels;
  return kernels;
}

}  // namespace tandem::cpu
