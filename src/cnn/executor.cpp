// SPDX-License-Identifier: Apache-2.0
// cnn::Executor: memory planning and node dispatch over tiles (see tandem/cnn/executor.h).
#include "tandem/cnn/executor.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "cnn/blocked.h"
#include "cnn/kernels.h"
#include "tandem/cnn/device_runner.h"
#include "tandem/core/backend.h"
#include "tandem/core/error.h"

namespace tandem::cnn {

namespace {

// Per-call plan: the nodes that run, the region and channels each tensor is computed over and
// the pool slot holding it.
struct Plan {
  std::vector<int> nodes;       // the given nodes the wanted channels need, in order
  std::vector<Region> regions;  // by tensor id
  std::vector<Channels> chans;  // by tensor id
  std::vector<int> slot;        // by tensor id; -1: not pooled (input tile or returned tensor)
  std::vector<int64_t> slot_elems;
  MemoryPlan stats;
};

Shape tile_shape(const Shape& full, const Region& r, const Channels& c) {
  if (full.rank() == 4) return Shape{full[0], c.size(), r.rows(), r.cols()};
  if (full.rank() < 2) return full;
  Shape s = full;
  s[1] = c.size();
  return s;
}

// A tensor's rows along axis 0 cut to [c0, c1): a view when it is contiguous.
Tensor rows_of(const Tensor& t, const Channels& c) {
  if (!t.defined()) return t;
  const Tensor flat = t.is_contiguous() ? t : t.contiguous();
  return flat.reshape({flat.numel()}).slice(0, c.c0, c.c1);
}

// Node `n` restricted to output channels `c` (region.h node_channels): the weight and bias rows
// of a conv or gemm, the per-channel parameters of an affine or a constant add/mul, as views.
Node slice_node(const Node& n, const Channels& c, int64_t full_c) {
  Node s = n;
  switch (n.op) {
    case OpKind::kConv:
      s.weight = n.weight.slice(0, c.c0, c.c1);
      if (n.groups > 1) s.groups = static_cast<int>(c.size() / (full_c / n.groups));
      [[fallthrough]];
    case OpKind::kGemm:
      if (n.op == OpKind::kGemm) s.weight = n.weight.slice(0, c.c0, c.c1);
      if (n.bias.defined()) s.bias = rows_of(n.bias, c);
      break;
    case OpKind::kAffine:
    case OpKind::kAdd:
    case OpKind::kMul:
      if (n.weight.defined() && n.weight.numel() == full_c) s.weight = rows_of(n.weight, c);
      if (n.bias.defined() && n.bias.numel() == full_c) s.bias = rows_of(n.bias, c);
      break;
    default:
      break;
  }
  return s;
}

bool env_off(const char* name) {
  const char* e = std::getenv(name);
  return e && std::string(e) == "0";
}

bool elementwise(OpKind op) {
  return op == OpKind::kActivation || op == OpKind::kAffine || op == OpKind::kAdd ||
         op == OpKind::kMul;
}

}  // namespace

struct Executor::Impl {
  Graph g;
  ExecutorOptions opts;
  std::vector<std::unique_ptr<kernels::ConvKernel>> convs;  // by node id
  // Cached whole-graph plan and its slot storage.
  bool have_full_plan = false;
  Plan full_plan;
  std::vector<Tensor> full_slots;
  std::unique_ptr<DeviceRunner> device;             // ExecutorOptions::device other than the CPU
  std::unique_ptr<kernels::BlockedRunner> blocked;  // whole-image runs, planned on first use
  std::vector<Tensor> kept;                         // keep_all
  std::vector<double> times;                        // profile
  MemoryPlan last_stats;
  // Nodes restricted to an output-channel range (run_region with channels), made on first use:
  // the node with its weight rows as views and, for a conv, its kernel with the slice packed.
  struct Slice {
    Node node;
    std::unique_ptr<kernels::ConvKernel> conv;
  };
  std::map<std::tuple<int, int64_t, int64_t>, Slice> slices;

  Slice& slice(int id, const Channels& c) {
    auto& s = slices[{id, c.c0, c.c1}];
    if (s.node.outputs.empty()) {
      const Node& n = g.node(id);
      s.node = slice_node(n, c, g.tensor(n.outputs[0]).shape[1]);
      if (convs[id]) {
        Shape in = g.tensor(n.inputs[0]).shape;
        in[1] = input_channels(g, id, 0, c).size();
        s.conv = convs[id]->for_channels(s.node, in, std::max(opts.threads, 1));
      }
    }
    return s;
  }

  // Whole-image runs keep activations blocked when oneDNN runs the convolutions (blocked.h),
  // unless ExecutorOptions::blocked is off or TANDEM_CNN_BLOCKED=0.
  bool use_blocked() const {
#if defined(TANDEM_HAVE_DNNL)
    const char* e = std::getenv("TANDEM_CNN_BLOCKED");
    return opts.blocked && opts.use_onednn && !(e && std::string(e) == "0");
#else
    return false;
#endif
  }

  Plan make_plan(const std::vector<int>& all, const std::map<int, Tile>& inputs,
                 const std::map<int, Region>& wanted,
                 const std::map<int, Channels>& wanted_channels) const {
    Plan p;
    std::map<int, Channels> want;
    for (const auto& [t, r] : wanted) {
      auto it = wanted_channels.find(t);
      want[t] = it != wanted_channels.end() ? it->second : full_channels(g.tensor(t).shape);
    }
    p.chans = required_channels(g, all, want);
    for (int id : all) {
      bool needed = false;
      for (int t : g.node(id).outputs) needed |= !p.chans[t].empty();
      if (needed) p.nodes.push_back(id);
    }
    const std::vector<int>& nodes = p.nodes;
    p.regions = required_regions(g, nodes, wanted);
    const size_t nt = g.tensors().size();
    p.slot.assign(nt, -1);
    std::vector<int> last_use(nt, -1);
    for (size_t k = 0; k < nodes.size(); ++k)
      for (int t : g.node(nodes[k]).inputs) last_use[t] = static_cast<int>(k);
    std::vector<char> pooled(nt, 0);
    for (int id : nodes)
      for (int t : g.node(id).outputs)
        pooled[t] = !wanted.count(t) && !opts.keep_all && !inputs.count(t);
    std::vector<int> free_slots;
    auto elems = [&](int t) {
      return tile_shape(g.tensor(t).shape, p.regions[t], p.chans[t]).numel();
    };
    auto take = [&](int t) {
      const int64_t need = elems(t);
      p.stats.naive_bytes += need * 4;
      if (!pooled[t]) return;
      int best = -1;
      for (size_t i = 0; i < free_slots.size(); ++i) {  // smallest free slot that fits
        const int s = free_slots[i];
        if (p.slot_elems[s] >= need &&
            (best < 0 || p.slot_elems[s] < p.slot_elems[free_slots[best]]))
          best = static_cast<int>(i);
      }
      if (best < 0 && !free_slots.empty()) {  // else grow the largest free one
        best = 0;
        for (size_t i = 1; i < free_slots.size(); ++i)
          if (p.slot_elems[free_slots[i]] > p.slot_elems[free_slots[best]])
            best = static_cast<int>(i);
      }
      int s;
      if (best >= 0) {
        s = free_slots[best];
        free_slots.erase(free_slots.begin() + best);
        p.slot_elems[s] = std::max(p.slot_elems[s], need);
      } else {
        s = static_cast<int>(p.slot_elems.size());
        p.slot_elems.push_back(need);
      }
      p.slot[t] = s;
    };
    for (size_t k = 0; k < nodes.size(); ++k) {
      const Node& n = g.node(nodes[k]);
      bool outputs_computed = false;
      for (int t : n.outputs) outputs_computed |= !p.regions[t].empty();
      if (!outputs_computed) continue;
      std::vector<int> dying;
      for (int t : n.inputs)
        if (last_use[t] == static_cast<int>(k) && p.slot[t] >= 0 &&
            std::find(dying.begin(), dying.end(), t) == dying.end())
          dying.push_back(t);
      // Elementwise ops may write over an input that dies here and covers the same region.
      int reuse = -1;
      // So may a conv over its residual (oneDNN's sum post-op accumulates into the destination).
      const int over =
          n.op == OpKind::kConv ? (n.inputs.size() == 2 ? n.inputs[1] : -1) : n.inputs[0];
      if ((elementwise(n.op) || n.op == OpKind::kConv) && pooled[n.outputs[0]]) {
        for (int t : dying)
          if (p.regions[t] == p.regions[n.outputs[0]] && p.chans[t] == p.chans[n.outputs[0]] &&
              g.tensor(t).shape == g.tensor(n.outputs[0]).shape && over == t) {
            reuse = t;
            break;
          }
      }
      if (reuse >= 0) {
        p.slot[n.outputs[0]] = p.slot[reuse];
        p.stats.naive_bytes += elems(n.outputs[0]) * 4;
        dying.erase(std::find(dying.begin(), dying.end(), reuse));
      } else {
        for (int t : n.outputs) take(t);
      }
      for (int t : dying) free_slots.push_back(p.slot[t]);
    }
    p.stats.slots = static_cast<int>(p.slot_elems.size());
    for (int64_t e : p.slot_elems) p.stats.planned_bytes += e * 4;
    for (const auto& [t, r] : wanted) p.stats.planned_bytes += elems(t) * 4;
    return p;
  }

  // Runs `nodes` under plan p; tiles of every computed tensor end up in `tiles`.
  void execute(const Plan& p, std::vector<Tensor>& slots, std::vector<kernels::View>& views) {
    const int threads = std::max(opts.threads, 1);
    if (slots.size() != p.slot_elems.size()) slots.resize(p.slot_elems.size());
    for (size_t s = 0; s < slots.size(); ++s)
      if (!slots[s].defined() || slots[s].numel() < p.slot_elems[s])
        slots[s] = Tensor::empty({std::max<int64_t>(p.slot_elems[s], 1)}, DType::kF32);
    auto make_out = [&](int t) {
      const Shape s = tile_shape(g.tensor(t).shape, p.regions[t], p.chans[t]);
      Tensor out = p.slot[t] >= 0 ? slots[p.slot[t]].slice(0, 0, s.numel()).reshape(s)
                                  : Tensor::empty(s, DType::kF32);
      views[t] = {out, p.regions[t], g.tensor(t).shape, p.chans[t]};
      return out;
    };
    if (opts.profile) times.assign(g.nodes().size(), 0.0);
    for (int id : p.nodes) {
      const auto t0 = std::chrono::steady_clock::now();
      run_node(id, p, views, make_out, threads);
      if (opts.profile)
        times[id] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
    }
  }

  template <class MakeOut>
  void run_node(int id, const Plan& p, std::vector<kernels::View>& views, MakeOut& make_out,
                int threads) {
    {
      const Node& n = g.node(id);
      Region out;
      for (int t : n.outputs) out = hull(out, p.regions[t]);
      if (out.empty()) return;
      // A node asked for part of its channels runs restricted to them (slice()).
      const Channels och = p.chans[n.outputs[0]];
      Slice* part = n.outputs.size() == 1 && !(och == full_channels(g.tensor(n.outputs[0]).shape))
                        ? &slice(id, och)
                        : nullptr;
      std::vector<kernels::View> in;
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const int t = n.inputs[i];
        const Channels need_c = input_channels(g, id, static_cast<int>(i), och);
        if (need_c.empty()) continue;  // a concat input outside the channels computed
        const kernels::View& v = views[t];
        if (!v.t.defined())
          throw InvalidArgument(cat("cnn run_region: node '", n.name, "' reads '", g.tensor(t).name,
                                    "', which is neither computed nor given"));
        const Region need = input_region(g, id, static_cast<int>(i), out);
        if (!v.region.contains(need))
          throw InvalidArgument(cat("cnn run_region: the tile of '", g.tensor(t).name, "' covers ",
                                    v.region.to_string(), " but node '", n.name, "' needs ",
                                    need.to_string()));
        if (!v.ch.contains(need_c))
          throw InvalidArgument(cat("cnn run_region: the tile of '", g.tensor(t).name,
                                    "' holds channels ", v.ch.to_string(), " but node '", n.name,
                                    "' needs ", need_c.to_string()));
        in.push_back(kernels::crop_channels(kernels::crop(v, need), need_c));
      }
      std::vector<Tensor> ys;
      for (int t : n.outputs) ys.push_back(make_out(t));
      kernels::dispatch(part ? part->node : n, part ? part->conv.get() : convs[id].get(), in, out,
                        ys, threads);
    }
  }
};

namespace kernels {

void dispatch(const Node& n, ConvKernel* conv, const std::vector<View>& in, const Region& out,
              std::vector<Tensor>& ys, int threads) {
  Tensor& y = ys[0];
  switch (n.op) {
    case OpKind::kConv:
      conv->run(in[0], in.size() > 1 ? &in[1] : nullptr, out, y, threads);
      break;
    case OpKind::kMaxPool:
    case OpKind::kAveragePool:
      pool(n, in[0], out, y, threads);
      break;
    case OpKind::kGlobalAveragePool:
      global_average_pool(in[0], y, threads);
      break;
    case OpKind::kAdd:
    case OpKind::kMul:
      binary(n, in[0], in.size() > 1 ? &in[1] : nullptr, y, threads);
      break;
    case OpKind::kConcat:
      concat(in, y, threads);
      break;
    case OpKind::kResize:
      resize_nearest(n, in[0], out, y, threads);
      break;
    case OpKind::kFlatten:
    case OpKind::kReshape:
      copy_reshape(in[0].t, y);
      break;
    case OpKind::kGemm:
      gemm(n, in[0].t, y, threads);
      break;
    case OpKind::kSoftmax:
      softmax(in[0].t, y);
      break;
    case OpKind::kSplit: {
      std::vector<Tensor*> ptrs;
      for (Tensor& t : ys) ptrs.push_back(&t);
      split(n, in[0], ptrs, threads);
      break;
    }
    case OpKind::kActivation:
      activation(n.act, in[0], y, threads);
      break;
    case OpKind::kAffine:
      affine(n, in[0], y, threads);
      break;
  }
}

}  // namespace kernels

Executor::Executor(const Graph& graph, ExecutorOptions opts) : impl_(std::make_unique<Impl>()) {
  impl_->g = graph;
  impl_->opts = opts;
  if (opts.threads < 1) throw InvalidArgument(cat("cnn::Executor: threads ", opts.threads, " < 1"));
  for (const TensorInfo& t : graph.tensors())
    if (t.shape.rank() == 0)
      throw InvalidArgument(
          cat("cnn::Executor: tensor '", t.name, "' has no shape (run Graph::infer_shapes first)"));
  if (!opts.device.is_cpu()) {
    if (opts.keep_all || opts.profile)
      throw Unsupported("cnn::Executor: keep_all and profile are CPU-only");
    BackendRegistry::global().get(opts.device);  // NotFound naming the device when absent
    const DeviceRunnerFactory make = find_device_runner(opts.device.type);
    if (!make)
      throw Unsupported(cat("cnn::Executor: no CNN runner for ", opts.device.to_string(),
                            " (the backend module was built without cuDNN)"));
    impl_->device = make(impl_->g, opts.device);
    return;
  }
  impl_->convs.resize(graph.nodes().size());
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    if (graph.node(static_cast<int>(i)).op == OpKind::kConv)
      impl_->convs[i] = std::make_unique<kernels::ConvKernel>(
          graph.node(static_cast<int>(i)),
          graph.tensor(graph.node(static_cast<int>(i)).inputs[0]).shape, opts.use_onednn,
          opts.winograd && !env_off("TANDEM_CNN_WINOGRAD"));
  // Winograd convs compute whole transform tiles: the region algebra must know their grid.
  for (size_t i = 0; i < graph.nodes().size(); ++i)
    if (impl_->convs[i])
      impl_->g.mutable_nodes()[i].window.out_grid =
          impl_->convs[i]->output_grid(std::max(opts.threads, 1));
}

Executor::~Executor() = default;

const Graph& Executor::graph() const { return impl_->g; }
const std::vector<Tensor>& Executor::tensors() const { return impl_->kept; }
const MemoryPlan& Executor::memory_plan() const { return impl_->last_stats; }
const std::vector<double>& Executor::node_times_ms() const { return impl_->times; }

std::vector<std::string> Executor::node_impls() const {
  const Impl& m = *impl_;
  std::vector<std::string> out(m.g.nodes().size());
  const std::vector<char> blocked =
      m.blocked ? m.blocked->blocked_nodes() : std::vector<char>(out.size(), 0);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i < m.convs.size() && m.convs[i])
      out[i] = m.convs[i]->impl_name();
    else
      out[i] = blocked[i] ? "tandem:blocked" : "tandem:nchw";
  }
  return out;
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
  Impl& m = *impl_;
  const Graph& g = m.g;
  if (inputs.size() != g.inputs().size())
    throw InvalidArgument(
        cat("cnn::Executor::run: ", inputs.size(), " inputs for a graph with ", g.inputs().size()));
  std::map<int, Tile> tiles;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int t = g.inputs()[i];
    const Tensor& x = inputs[i];
    if (!x.defined() || x.dtype() != DType::kF32 || !(x.shape() == g.tensor(t).shape))
      throw InvalidArgument(cat("cnn::Executor::run: input '", g.tensor(t).name, "' must be f32 ",
                                g.tensor(t).shape.to_string(), ", got ",
                                x.defined() ? x.to_string() : "undefined"));
    tiles[t] = {x, full_region(x.shape()), full_channels(x.shape())};
  }
  if (m.device) return m.device->run(inputs);
  if (m.use_blocked()) {
    if (!m.blocked)
      m.blocked = std::make_unique<kernels::BlockedRunner>(g, m.convs, std::max(m.opts.threads, 1),
                                                           m.opts.keep_all);
    std::vector<Tensor> plain_inputs;
    for (int t : g.inputs()) plain_inputs.push_back(tiles[t].data);
    if (m.opts.profile) m.times.assign(g.nodes().size(), 0.0);
    std::vector<Tensor> out = m.blocked->run(plain_inputs, m.opts.keep_all ? &m.kept : nullptr,
                                             m.opts.profile ? &m.times : nullptr);
    m.last_stats = m.blocked->stats();
    return out;
  }
  std::map<int, Region> wanted;
  for (int t : g.outputs()) wanted[t] = full_region(g.tensor(t).shape);
  const std::vector<int> nodes = all_nodes(g);
  if (!m.have_full_plan) {
    m.full_plan = m.make_plan(nodes, tiles, wanted, {});
    m.have_full_plan = true;
  }
  std::vector<kernels::View> views(g.tensors().size());
  for (const auto& [t, tile] : tiles)
    views[t] = {tile.data, tile.region, g.tensor(t).shape, tile.channels};
  m.execute(m.full_plan, m.full_slots, views);
  m.last_stats = m.full_plan.stats;
  if (m.opts.keep_all) {
    m.kept.assign(g.tensors().size(), Tensor());
    for (size_t t = 0; t < views.size(); ++t) m.kept[t] = views[t].t;
  }
  std::vector<Tensor> out;
  for (int t : g.outputs()) out.push_back(views[t].t);
  return out;
}

std::map<int, Tile> Executor::run_region(const std::vector<int>& nodes,
                                         const std::map<int, Tile>& inputs,
                                         const std::map<int, Region>& wanted,
                                         const std::map<int, Channels>& channels) {
  Impl& m = *impl_;
  const Graph& g = m.g;
  if (m.device)
    throw Unsupported(
        cat("cnn run_region: tiles run on the CPU only, not on ", m.opts.device.to_string()));
  for (int id : nodes)
    if (id < 0 || id >= static_cast<int>(g.nodes().size()))
      throw InvalidArgument(cat("cnn run_region: node id ", id, " out of range"));
  std::vector<kernels::View> views(g.tensors().size());
  for (const auto& [t, tile] : inputs) {
    if (t < 0 || t >= static_cast<int>(g.tensors().size()))
      throw InvalidArgument(cat("cnn run_region: tensor id ", t, " out of range"));
    const Shape& shape = g.tensor(t).shape;
    const Channels have = tile.channels.empty() ? full_channels(shape) : tile.channels;
    if (!full_channels(shape).contains(have))
      throw InvalidArgument(cat("cnn run_region: tile of '", g.tensor(t).name, "' holds channels ",
                                have.to_string(), " outside ", shape.to_string()));
    const Shape want = tile_shape(shape, tile.region, have);
    if (!tile.data.defined() || !(tile.data.shape() == want))
      throw InvalidArgument(cat("cnn run_region: tile of '", g.tensor(t).name, "' for ",
                                tile.region.to_string(), " must have shape ", want.to_string()));
    views[t] = {tile.data, tile.region, shape, have};
  }
  for (const auto& [t, c] : channels) {
    if (!wanted.count(t))
      throw InvalidArgument(
          cat("cnn run_region: channels asked of tensor id ", t, ", which is not wanted"));
    if (c.empty() || !full_channels(g.tensor(t).shape).contains(c))
      throw InvalidArgument(cat("cnn run_region: channels ", c.to_string(), " of '",
                                g.tensor(t).name, "' are not inside ",
                                full_channels(g.tensor(t).shape).to_string()));
  }
  Plan p = m.make_plan(nodes, inputs, wanted, channels);
  std::vector<Tensor> slots;
  m.execute(p, slots, views);
  m.last_stats = p.stats;
  std::map<int, Tile> out;
  for (const auto& [t, r] : wanted) {
    const kernels::View& v = views[t];
    if (!v.t.defined())
      throw InvalidArgument(
          cat("cnn run_region: '", g.tensor(t).name, "' is not computed by the given nodes"));
    const Region want = intersect(r, full_region(g.tensor(t).shape));
    auto c = channels.find(t);
    const Channels ch = c != channels.end() ? c->second : full_channels(g.tensor(t).shape);
    out[t] = {kernels::crop_channels(kernels::crop(v, want), ch).t.contiguous(), want, ch};
  }
  return out;
}

}  // namespace tandem::cnn
