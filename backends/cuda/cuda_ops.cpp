// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's kernel table: argument plumbing from tensors to the launchers in kernels/, on
// the caller's stream or synchronously. Arguments were validated by src/core/ops.cpp.
#include <cuda_runtime_api.h>

#include <algorithm>

#include <vector>

#include "cuda_ops.h"
#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::cuda {

// ------------------------------------------------------------------------------------------------
// OpScope

int OpScope::resolve(CudaBackend& backend, const Tensor& out, const char* op) {
  check_not_in_host_function(op);
  if (!out.device().is_cuda())
    throw InvalidArgument(
        cat(op, ": the CUDA backend got an output on ", out.device().to_string()));
  return backend.ordinal(out.device().index);
}

OpScope::OpScope(CudaBackend& backend, const Tensor& out, Stream* s, const char* op)
    : device_(out.device()), guard_(resolve(backend, out, op)) {
  if (s == nullptr) {
    stream_ = &backend.internal_stream(device_.index);
    return;
  }
  auto* cs = dynamic_cast<CudaStream*>(s);
  if (!cs || !(cs->device() == device_))
    throw InvalidArgument(cat(op, ": tensors on ", device_.to_string(),
                              " need a stream of that device, got one of ",
                              s->device().to_string()));
  stream_ = cs;
  sync_ = false;
}

Tensor OpScope::scratch(const Shape& shape, DType dtype) {
  scratch_.push_back(Tensor::empty(shape, dtype, device_));
  return scratch_.back();
}

Tensor OpScope::contiguous(const Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return t;
  Tensor c = scratch(t.shape(), t.dtype());
  k::StridedView v;
  v.rank = t.rank();
  for (int i = 0; i < t.rank(); ++i) {
    v.shape[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  TANDEM_CHECK(!dtype_is_blocked(t.dtype())) << "strided " << t.to_string() << " operand";
  scratch_.push_back(t);  // the source stays alive until the gather has run
  TANDEM_CUDA_CHECK(k::gather_units(t.raw_data(), v, dtype_block_bytes(t.dtype()), c.raw_data(),
                                    t.numel(), stream()));
  return c;
}

void OpScope::finish(std::vector<Tensor> keep) {
  if (sync_) {
    stream_->wait_idle();
    return;
  }
  for (auto& t : scratch_) keep.push_back(std::move(t));
  scratch_.clear();
  stream_->retain(std::move(keep));
}

namespace {

int64_t rows_of(const Tensor& t) {
  const int64_t cols = t.rank() == 0 ? 1 : t.size(-1);
  return cols == 0 ? 0 : t.numel() / cols;
}
int64_t cols_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.size(-1); }

k::StridedView element_view(const Tensor& t) {
  k::StridedView v;
  v.rank = t.rank();
  for (int i = 0; i < t.rank(); ++i) {
    v.shape[i] = t.size(i);
    v.strides[i] = t.stride(i);
  }
  return v;
}

// The view of t in storage units (blocks for block types): rows stay dense, outer strides scale
// down.
k::StridedView unit_view(const Tensor& t) {
  k::StridedView v = element_view(t);
  const int64_t block = dtype_block_size(t.dtype());
  if (block == 1 || t.rank() == 0) return v;
  if (t.stride(-1) != 1 && t.size(-1) != 1)
    throw Unsupported(cat("convert: ", t.to_string(), " has a strided last dimension"));
  for (int i = 0; i < t.rank() - 1; ++i) {
    if (t.stride(i) % block != 0)
      throw Unsupported(
          cat("convert: stride ", t.stride(i), " of ", t.to_string(), " splits a block"));
    v.strides[i] = t.stride(i) / block;
  }
  v.shape[t.rank() - 1] = t.size(-1) / block;
  v.strides[t.rank() - 1] = 1;
  return v;
}

// GGUF K-quant blocks (Q4_K, Q6_K) have CPU kernels only so far.
void no_k_quant(const Tensor& t, const char* op) {
  if (dtype_is_k_quant(t.dtype()))
    throw Unsupported(cat(op, " on ", t.device().to_string(), ": ", dtype_name(t.dtype()),
                          " weights are supported on the CPU only"));
}

class CudaKernels final : public ops::OpKernels {
 public:
  explicit CudaKernels(CudaBackend& b) : b_(b) {}

  void gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
            Stream* s) override {
    no_k_quant(b, "gemm");
    run_gemm(b_, a, b, c, p, s);
  }
  void batched_gemm(const Tensor& a, const Tensor& b, Tensor& c, const ops::GemmParams& p,
                    Stream* s) override {
    run_batched_gemm(b_, a, b, c, p, s);
  }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
              const ops::Conv2dParams& p, Stream* s) override {
    run_conv2d(b_, x, w, bias, y, p, s);
  }

  void softmax(const Tensor& x, Tensor& y, Stream* s) override {
    OpScope sc(b_, y, s, "softmax");
    TANDEM_CUDA_CHECK(
        k::softmax(ptr<float>(x), ptr<float>(y), rows_of(x), cols_of(x), sc.stream()));
    sc.finish({x, y});
  }

  void rms_norm(const Tensor& x, const Tensor& w, Tensor& y, const ops::NormParams& p,
                Stream* s) override {
    OpScope sc(b_, y, s, "rms_norm");
    const Tensor wc = sc.contiguous(w);
    TANDEM_CUDA_CHECK(k::rms_norm(ptr<float>(x), ptr<float>(wc), ptr<float>(y), rows_of(x),
                                  cols_of(x), p.eps, sc.stream()));
    sc.finish({x, w, y});
  }

  void layer_norm(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y,
                  const ops::NormParams& p, Stream* s) override {
    OpScope sc(b_, y, s, "layer_norm");
    const Tensor wc = sc.contiguous(w), bc = sc.contiguous(bias);
    TANDEM_CUDA_CHECK(k::layer_norm(ptr<float>(x), ptr<float>(wc),
                                    bc.defined() ? ptr<float>(bc) : nullptr, ptr<float>(y),
                                    rows_of(x), cols_of(x), p.eps, sc.stream()));
    sc.finish({x, w, bias, y});
  }

  void rope(const Tensor& x, const Tensor& pos, Tensor& y, const ops::RopeParams& p,
            Stream* s) override {
    OpScope sc(b_, y, s, "rope");
    const Tensor pc = sc.contiguous(pos);
    const int64_t rd = p.rotary_dim < 0 ? x.size(2) : p.rotary_dim;
    TANDEM_CUDA_CHECK(k::rope(ptr<float>(x), ptr<int32_t>(pc), ptr<float>(y), x.size(0), x.size(1),
                              x.size(2), rd, p.theta, p.neox, sc.stream()));
    sc.finish({x, pos, y});
  }

  void unary(ops::UnaryOp op, const Tensor& x, Tensor& y, Stream* s) override {
    OpScope sc(b_, y, s, "unary");
    TANDEM_CUDA_CHECK(k::unary(op, ptr<float>(x), ptr<float>(y), x.numel(), sc.stream()));
    sc.finish({x, y});
  }

  void binary(ops::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y, Stream* s) override {
    OpScope sc(b_, y, s, "binary");
    TANDEM_CUDA_CHECK(k::binary(op, ptr<float>(a), ptr<float>(b), ptr<float>(y), a.numel(),
                                b.numel(), sc.stream()));
    sc.finish({a, b, y});
  }

  // Ids are copied to the host and checked first (the CPU contract: InvalidArgument for ids outside
  // [0, V)). On a caller's stream this waits for the work queued before the op; the kernel
  // additionally clamps ids, so memory is never read out of bounds.
  void embedding(const Tensor& table, const Tensor& ids, Tensor& out, Stream* s) override {
    no_k_quant(table, "embedding");
    OpScope sc(b_, out, s, "embedding");
    const int64_t tokens = ids.numel(), vocab = table.size(0), dim = table.size(1);
    if (tokens > 0) {
      std::vector<int32_t> host(static_cast<size_t>(tokens));
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(host.data(), ids.raw_data(), host.size() * sizeof(int32_t),
                                        cudaMemcpyDeviceToHost, sc.stream()));
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(sc.stream()));
      for (int64_t t = 0; t < tokens; ++t) {
        const int32_t id = host[static_cast<size_t>(t)];
        if (id < 0 || id >= vocab)
          throw InvalidArgument(
              cat("embedding: id ", id, " at position ", t, " outside [0, ", vocab, ")"));
      }
    }
    TANDEM_CUDA_CHECK(k::embedding(table.dtype(), table.raw_data(), ptr<int32_t>(ids),
                                   ptr<float>(out), tokens, vocab, dim, sc.stream()));
    sc.finish({table, ids, out});
  }

  // Indices and offsets are copied to the host and checked first (the CPU contract:
  // InvalidArgument for an index outside [0, rows) or bad offsets). On a caller's stream this waits
  // for the work queued before the op.
  void embedding_bag(const Tensor& table, const Tensor& indices, const Tensor& offsets, Tensor& out,
                     ops::BagMode mode, Stream* s) override {
    OpScope sc(b_, out, s, "embedding_bag");
    const int64_t n = indices.numel(), bags = offsets.numel() - 1;
    std::vector<uint8_t> host_idx(static_cast<size_t>(indices.nbytes()));
    std::vector<uint8_t> host_off(static_cast<size_t>(offsets.nbytes()));
    if (!host_idx.empty())
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_idx.data(), indices.raw_data(), host_idx.size(),
                                        cudaMemcpyDeviceToHost, sc.stream()));
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host_off.data(), offsets.raw_data(), host_off.size(),
                                      cudaMemcpyDeviceToHost, sc.stream()));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(sc.stream()));
    ops::check_embedding_bag_indices(host_idx.data(), indices.dtype(), n, host_off.data(),
                                     offsets.dtype(), bags, table.size(0));
    k::EmbeddingBagArgs a;
    a.table_dtype = table.dtype();
    a.table = table.raw_data();
    a.rows = table.size(0);
    a.dim = ops::embedding_bag_dim(table);
    a.indices = indices.raw_data();
    a.offsets = offsets.raw_data();
    a.indices_64 = indices.dtype() == DType::kI64 ? 1 : 0;
    a.offsets_64 = offsets.dtype() == DType::kI64 ? 1 : 0;
    a.bags = bags;
    a.mean = mode == ops::BagMode::kMean ? 1 : 0;
    a.out = ptr<float>(out);
    TANDEM_CUDA_CHECK(k::embedding_bag(a, sc.stream()));
    sc.finish({table, indices, offsets, out});
  }

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                 const ops::AttentionParams& p, Tensor* probs, Stream* s) override {
    OpScope sc(b_, out, s, "attention");
    k::AttentionArgs a;
    a.q = ptr<float>(q);
    a.k = ptr<float>(k);
    a.v = ptr<float>(v);
    a.out = ptr<float>(out);
    a.tq = q.size(0);
    a.hq = q.size(1);
    a.d = q.size(2);
    a.tk = k.size(0);
    a.hkv = k.size(1);
    a.dv = v.size(2);
    a.scale = p.scale;
    a.causal = p.causal;
    a.q_offset = p.q_offset;
    int max_smem = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                             b_.ordinal(out.device().index)));
    if (k::attention_smem_bytes(a.d, a.dv) > static_cast<size_t>(max_smem))
      throw Unsupported(cat("attention on ", out.device().to_string(), ": head dims ", a.d, " + ",
                            a.dv, " need more shared memory than the device's ", max_smem,
                            " bytes per block"));
    TANDEM_CUDA_CHECK(k::attention(a, sc.stream()));
    std::vector<Tensor> keep{q, k, v, out};
    if (probs && !p.prob_rows.empty()) {
      const auto n_rows = static_cast<int64_t>(p.prob_rows.size());
      Tensor host_rows = Tensor::from_vector(p.prob_rows, Shape{n_rows}, DType::kI64);
      Tensor rows = sc.scratch(Shape{n_rows}, DType::kI64);
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(rows.raw_data(), host_rows.raw_data(),
                                        static_cast<size_t>(host_rows.nbytes()),
                                        cudaMemcpyHostToDevice, sc.stream()));
      TANDEM_CUDA_CHECK(
          k::attention_probs(a, ptr<int64_t>(rows), n_rows, ptr<float>(*probs), sc.stream()));
      keep.push_back(host_rows);
      keep.push_back(*probs);
    }
    sc.finish(std::move(keep));
  }

  // The page table (device pointers, sizes, slot positions), the chunk plan (flash_decode.h) and
  // the query positions are packed into one host buffer and copied to the device in one transfer
  // before the split and merge kernels; the chunks' partial states live in a scratch buffer.
  void paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                       const ops::PagedKv& kv, Tensor& out, float scale, Stream* s) override {
    OpScope sc(b_, out, s, "paged_attention");
    const int64_t hkv = static_cast<int64_t>(kv.heads.size());
    const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2), group = hq / hkv;
    int max_smem = 0;
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&max_smem, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                             b_.ordinal(out.device().index)));
    if (k::paged_attention_smem_bytes(d, group) > static_cast<size_t>(max_smem))
      throw Unsupported(cat("paged_attention on ", out.device().to_string(), ": head dim ", d,
                            " with ", group, " query heads per KV head needs more shared memory ",
                            "than the device's ", max_smem, " bytes"));
    std::vector<int32_t> used;
    std::vector<int64_t> head_page_begin;
    int64_t n_slots = 0, max_head_slots = 0;
    for (const auto& pages : kv.heads) {
      head_page_begin.push_back(static_cast<int64_t>(used.size()));
      int64_t head_slots = 0;
      for (const ops::KvPage& pg : pages) {
        used.push_back(pg.used);
        head_slots += pg.used;
      }
      n_slots += head_slots;
      max_head_slots = std::max(max_head_slots, head_slots);
    }
    head_page_begin.push_back(static_cast<int64_t>(used.size()));
    std::vector<FlashChunk> chunks;
    std::vector<int64_t> head_chunk_begin;
    plan_flash_chunks(used, head_page_begin, flash_chunk_slots(tq, hkv, max_head_slots), chunks,
                      head_chunk_begin);
    const auto n_pages = static_cast<int64_t>(used.size());
    const auto n_chunks = static_cast<int64_t>(chunks.size());
    const int64_t off_chunks = n_pages * static_cast<int64_t>(sizeof(k::PagedPage));
    const int64_t off_begin = off_chunks + n_chunks * static_cast<int64_t>(sizeof(FlashChunk));
    const int64_t off_qpos = off_begin + (hkv + 1) * 8;
    const int64_t off_pos = off_qpos + ((tq * 4 + 7) / 8) * 8;
    const int64_t total = off_pos + n_slots * 4;
    Tensor host = Tensor::empty({total}, DType::kU8);
    Tensor dev = sc.scratch({total}, DType::kU8);
    auto* hb = static_cast<uint8_t*>(host.raw_data());
    auto* db = static_cast<uint8_t*>(dev.raw_data());
    auto* pages_h = reinterpret_cast<k::PagedPage*>(hb);
    auto* pos_h = reinterpret_cast<int32_t*>(hb + off_pos);
    std::copy(chunks.begin(), chunks.end(), reinterpret_cast<FlashChunk*>(hb + off_chunks));
    std::copy(head_chunk_begin.begin(), head_chunk_begin.end(),
              reinterpret_cast<int64_t*>(hb + off_begin));
    std::copy(q_positions.begin(), q_positions.end(), reinterpret_cast<int32_t*>(hb + off_qpos));
    std::vector<Tensor> keep{q, out, host};
    int64_t page = 0, slot = 0;
    for (int64_t h = 0; h < hkv; ++h) {
      for (const ops::KvPage& pg : kv.heads[h]) {
        k::PagedPage& pd = pages_h[page++];
        pd.k = pg.k->raw_data();
        pd.v = pg.v->raw_data();
        pd.positions = reinterpret_cast<const int32_t*>(db + off_pos) + slot;
        pd.used = pg.used;
        pd.f16 = pg.k->dtype() == DType::kF16 ? 1 : 0;
        std::copy(pg.positions, pg.positions + pg.used, pos_h + slot);
        slot += pg.used;
        keep.push_back(*pg.k);
        keep.push_back(*pg.v);
      }
    }
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(db, hb, static_cast<size_t>(total), cudaMemcpyHostToDevice, sc.stream()));
    Tensor partial = sc.scratch(
        {std::max<int64_t>(1, k::paged_attention_partial_floats(tq, n_chunks, group, d))},
        DType::kF32);
    k::PagedAttentionArgs a;
    a.q = ptr<float>(q);
    a.out = ptr<float>(out);
    a.q_pos = reinterpret_cast<const int32_t*>(db + off_qpos);
    a.pages = reinterpret_cast<const k::PagedPage*>(db);
    a.chunks = reinterpret_cast<const FlashChunk*>(db + off_chunks);
    a.head_chunk_begin = reinterpret_cast<const int64_t*>(db + off_begin);
    a.n_chunks = n_chunks;
    a.partial = ptr<float>(partial);
    a.tq = tq;
    a.hq = hq;
    a.hkv = hkv;
    a.d = d;
    a.scale = scale;
    TANDEM_CUDA_CHECK(k::paged_attention(a, sc.stream()));
    sc.finish(std::move(keep));
  }

  void quantized_paged_attention(const Tensor& q, std::span<const int32_t> q_positions,
                                 const ops::QuantPagedKv& kv, Tensor& out, float scale,
                                 Stream* s) override {
    run_quantized_paged_attention(b_, q, q_positions, kv, out, scale, s);
  }

  void convert(const Tensor& src, Tensor& dst, Stream* s) override {
    no_k_quant(src, "convert");
    OpScope sc(b_, dst, s, "convert");
    const int64_t n = src.numel();
    if (n > 0) {
      if (src.dtype() == dst.dtype()) {
        if (src.is_contiguous()) {
          TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(),
                                            static_cast<size_t>(src.nbytes()),
                                            cudaMemcpyDeviceToDevice, sc.stream()));
        } else {
          const k::StridedView v = unit_view(src);
          TANDEM_CUDA_CHECK(k::gather_units(src.raw_data(), v, dtype_block_bytes(src.dtype()),
                                            dst.raw_data(), n / dtype_block_size(src.dtype()),
                                            sc.stream()));
        }
      } else {
        k::StridedView v = element_view(src);
        if (dtype_is_blocked(
                src.dtype())) {  // contiguous (checked by ops::convert): one flat dimension
          v.rank = 1;
          v.shape[0] = n;
          v.strides[0] = 1;
        }
        TANDEM_CUDA_CHECK(k::convert(src.dtype(), src.raw_data(), v, dst.dtype(), dst.raw_data(), n,
                                     sc.stream()));
      }
    }
    sc.finish({src, dst});
  }

 private:
  CudaBackend& b_;
};

}  // namespace

std::unique_ptr<ops::OpKernels> make_cuda_kernels(CudaBackend& backend) {
  return std::make_unique<CudaKernels>(backend);
}

}  // namespace tandem::cuda
