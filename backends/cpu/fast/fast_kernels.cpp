// SPDX-License-Identifier: Apache-2.0
// The fast OpKernels table (the CPU backend's default): each op runs now (no stream) or is enqueued
// on the CPU stream with its tensors captured by value, which keeps their buffers alive until it
// ran.
#include <vector>

#include "../cpu_kernels.h"
#include "fast_ops.h"

namespace tandem::cpu {
namespace {

class FastKernels final : public ops::OpKernels {
 public:
  void gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
            Stream* s) override {
    run_on(s, [=] { fast::gemm(a, b, c, p); });
  }
  void gemm_group(const Tensor& a, std::span<const Tensor> bs, std::span<Tensor> cs,
                  const ops::GemmParams& p, Stream* s) override {
    if (s == nullptr) return fast::gemm_group(a, bs, std::span<const Tensor>(cs), p);
    s->launch([a, b = std::vector<Tensor>(bs.begin(), bs.end()),
               c = std::vector<Tensor>(cs.begin(), cs.end()), p] { fast::gemm_group(a, b, c, p); });
  }
  void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
                    Stream* s) override {
    run_on(s, [=] { fast::batched_gemm(a, b, c, p); });
  }
  void softmax(const Tensor& x, Tensor& y, Stream* s) override {
    run_on(s, [=] { fast::softmax(x, y); });
  }
  void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const ops::NormParams& p,
                Stream* s) override {
    run_on(s, [=] { fast::rms_norm(x, w, y, p); });
  }
  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                  const ops::NormParams& p, Stream* s) override {
    run_on(s, [=] { fast::layer_norm(x, w, b, y, p); });
  }
  void rope(const Tensor& x, const Tensor& pos, Tensor& y, const ops::RopeParams& p,
            Stream* s) override {
    run_on(s, [=] { fast::rope(x, pos, y, p); });
  }
  void unary(ops::UnaryOp op, const Tensor& x, Tensor& y, Stream* s) override {
    run_on(s, [=] { fast::unary(op, x, y); });
  }
  void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y, Stream* s) override {
    run_on(s, [=] { fast::binary(op, a, b, y); });
  }
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s) override {
    run_on(s, [=] { fast::embedding(table, ids, out); });
  }
  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const ops::AttentionParams& p, Tensor* probs, Stream* s) override {
    const Tensor pr = probs ? *probs : Tensor();
    run_on(s, [=] { fast::attention(q, k, v, out, p, pr.defined() ? &pr : nullptr); });
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
              const ops::Conv2dParams& p, Stream* s) override {
    run_on(s, [=] { fast::conv2d(x, w, bias, y, p); });
  }
  // The page table is only valid during the call: waits for the stream, then runs synchronously.
  void paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                       const ops::PagedKv& kv, Tensor& out, float scale, Stream* s) override {
    if (s) s->synchronize();
    fast::paged_attention(q, q_positions, kv, out, scale);
  }
  void convert(const Tensor& src, Tensor& dst, Stream* s) override {
    run_on(s, [=] { fast::convert(src, dst); });
  }
  // Synchronous, so that bad index data throw InvalidArgument to the caller.
  void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                     ops::BagMode mode, Stream* s) override {
    if (s) s->synchronize();
    fast::embedding_bag(table, indices, offsets, out, mode);
  }
};

}  // namespace

std::unique_ptr<ops::OpKernels> make_fast_kernels() { return std::make_unique<FastKernels>(); }

}  // namespace tandem::cpu
