// SPDX-License-Identifier: Apache-2.0
// RecModel on a device (cuda:0): copies of the weights and tables, and the device helpers the
// nodes use (linear layers, concatenation, embedding bags through ops::embedding_bag, uploads).
#include <cstring>

#include "recsys/model_impl.h"
#include "tandem/core/error.h"
#include "tandem/ops/ops.h"

namespace tandem::rec {
namespace {

// An EmbeddingTable's rows as an embedding_bag table tensor on the host (a copy).
Tensor table_tensor(const EmbeddingTable& t) {
  const bool i8 = t.dtype() == DType::kI8;
  const DType dt = i8 ? DType::kU8 : t.dtype();
  Tensor out = Tensor::empty({t.rows(), i8 ? t.dim() + 8 : t.dim()}, dt);
  if (t.bytes() > 0) std::memcpy(out.raw_data(), t.row_data(0), static_cast<size_t>(t.bytes()));
  return out;
}

std::vector<Tensor> tables_on(const std::vector<EmbeddingTable>& tabs, Device d) {
  std::vector<Tensor> out;
  for (const auto& t : tabs) out.push_back(table_tensor(t).to(d));
  return out;
}

}  // namespace

Tensor dev_contiguous(const Tensor& t, Stream* s) {
  if (t.is_contiguous()) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  ops::convert(t, out, s);
  return out;
}

const Tensor& RecModel::Impl::dw(const std::string& name) const {
  auto it = dev_weights.find(name);
  if (it == dev_weights.end())
    throw NotFound(
        cat("model '", cfg.name, "' has no weight '", name, "' on ", device.to_string()));
  return it->second;
}

void RecModel::Impl::to_device(Device d, bool ops_on_cpu) {
  dev_weights.clear();
  dev_tables.clear();
  dev_item_tables.clear();
  dev_wide_tables.clear();
  device = d;
  ops_path = !d.is_cpu() || ops_on_cpu;
  if (!ops_path) return;
  for (const auto& [name, t] : weights) dev_weights[name] = t.to(d);
  dev_tables = tables_on(tables, d);
  dev_item_tables = tables_on(item_tables, d);
  dev_wide_tables = tables_on(wide_tables, d);
}

Tensor RecModel::Impl::run_on_device(int id, QueryState& st, Stream* s) const {
  const NodeDef& n = nodes[id];
  if (!n.run_dev)
    throw Unsupported(
        cat("model '", cfg.name, "': node '", n.name, "' has no device implementation"));
  return n.run_dev(st, s);
}

Tensor dev_upload(const float* values, const Shape& shape, Device d, Stream* s) {
  Tensor host = Tensor::empty(shape, DType::kF32);
  if (host.numel() > 0)
    std::memcpy(host.raw_data(), values, sizeof(float) * static_cast<size_t>(host.numel()));
  return host.to(d, s);
}

Tensor dev_linear(const Tensor& x2d, const Tensor& w, const Tensor& b, bool relu,
                  const Tensor* residual, Stream* s) {
  const int64_t n = x2d.size(0), out = w.size(0);
  Tensor y = Tensor::empty({n, out}, DType::kF32, x2d.device());
  if (n == 0) return y;
  ops::gemm(x2d, w, y, {.trans_b = true}, s);
  ops::add(y, b, y, s);
  if (residual) ops::add(y, residual->reshape({n, out}), y, s);
  if (relu) ops::unary(ops::UnaryOp::kRelu, y, y, s);
  return y;
}

Tensor dev_concat(const std::vector<const Tensor*>& parts, int64_t rows, Stream* s) {
  TANDEM_CHECK(!parts.empty()) << "dev_concat of nothing";
  const Device d = parts.front()->device();
  int64_t width = 0;
  for (const Tensor* p : parts) width += rows == 0 ? 0 : p->numel() / rows;
  Tensor out = Tensor::empty({rows, width}, DType::kF32, d);
  if (rows == 0 || width == 0) return out;
  Tensor tr = Tensor::empty({width, rows}, DType::kF32, d);  // out^T: column blocks are rows
  int64_t col = 0;
  for (const Tensor* p : parts) {
    const int64_t w = p->numel() / rows;
    Tensor dst = tr.slice(0, col, col + w);
    ops::convert(p->reshape({rows, w}).transpose(0, 1), dst, s);
    col += w;
  }
  ops::convert(tr.transpose(0, 1), out, s);
  return out;
}

Tensor dev_bags(const Tensor& table, bool hash, uint64_t salt, const int64_t* ids,
                const int64_t* offsets, int64_t bags, Pooling mode, Stream* s) {
  const int64_t rows = table.size(0), dim = ops::embedding_bag_dim(table);
  const int64_t base = offsets[0], n = offsets[bags] - base;
  Tensor idx = Tensor::empty({n}, DType::kI64), off = Tensor::empty({bags + 1}, DType::kI64);
  int64_t* ip = idx.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) ip[i] = hash ? hash_id(ids[base + i], salt, rows) : ids[base + i];
  for (int64_t b = 0; b <= bags; ++b) off.data<int64_t>()[b] = offsets[b] - base;
  Tensor out = Tensor::empty({bags, dim}, DType::kF32, table.device());
  ops::embedding_bag(table, idx.to(table.device(), s), off.to(table.device(), s), out,
                     mode == Pooling::kMean ? ops::BagMode::kMean : ops::BagMode::kSum, s);
  return out;
}

Tensor dev_gather_items(const std::vector<Tensor>& tabs, const std::vector<TableConfig>& cfgs,
                        const std::vector<std::vector<int64_t>>& ids, int64_t n, Stream* s) {
  std::vector<int64_t> off(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) off[i] = i;
  std::vector<Tensor> parts;
  for (size_t k = 0; k < tabs.size(); ++k)
    parts.push_back(dev_bags(tabs[k], cfgs[k].hash, table_salt(cfgs[k].name), ids[k].data(),
                             off.data(), n, Pooling::kSum, s));
  if (parts.size() == 1) return parts.front();
  std::vector<const Tensor*> ptrs;
  for (const Tensor& p : parts) ptrs.push_back(&p);
  return dev_concat(ptrs, n, s);
}

}  // namespace tandem::rec
