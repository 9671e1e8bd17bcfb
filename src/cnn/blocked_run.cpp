// SPDX-License-Identifier: Apache-2.0
// BlockedRunner (blocked.h): plans a whole-graph run once, choosing per tensor the blocked or the
// NCHW layout, per node its kernel, the buffers (a pool of slots reused after a tensor's last
// consumer, in place where an elementwise op or a conv's residual allows) and the NCHW copies the
// ops without a blocked form need; run() then only executes.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "cnn/blocked.h"
#include "tandem/core/error.h"

namespace tandem::cnn::kernels {

namespace {

enum class Mode { kConv, kBlocked, kPlain };

struct Step {
  int node = -1;
  Mode mode = Mode::kPlain;
  std::vector<int> to_plain;  // blocked inputs copied to their NCHW shadow before this node
};

bool spatial(const Shape& s) { return s.rank() == 4; }

}  // namespace

struct BlockedRunner::Impl {
  const Graph& g;
  std::vector<std::unique_ptr<ConvKernel>>& convs;
  int threads;
  bool keep_all;
  int block = block_size();
  std::vector<Step> steps;
  std::vector<int> layout;        // by tensor: 0 NCHW, else the block
  std::vector<int> slot, shadow;  // by tensor: primary slot / NCHW copy slot (-1: none)
  std::vector<char> fresh;        // by tensor: a new NCHW tensor per run (graph output)
  std::vector<int64_t> slot_elems;
  std::vector<Tensor> slots;
  MemoryPlan stats;
  int blocked_count = 0;

  Impl(const Graph& graph, std::vector<std::unique_ptr<ConvKernel>>& c, int t, bool keep)
      : g(graph), convs(c), threads(t), keep_all(keep) {}

  BDims dims(int t) const {
    const Shape& s = g.tensor(t).shape;
    return BDims{s[0], s[1], s[2], s[3], block};
  }
  int64_t elems(int t, int lay) const { return lay ? dims(t).elems() : g.tensor(t).shape.numel(); }

  void plan() {
    const size_t nt = g.tensors().size();
    layout.assign(nt, 0);
    slot.assign(nt, -1);
    shadow.assign(nt, -1);
    fresh.assign(nt, 0);
    std::vector<int> last_use(nt, -1);
    const int nn = static_cast<int>(g.nodes().size());
    for (int k = 0; k < nn; ++k)
      for (int t : g.node(k).inputs) last_use[t] = k;
    std::vector<char> is_output(nt, 0);
    for (int t : g.outputs()) is_output[t] = 1;
    std::vector<int> free_slots;
    auto take = [&](int64_t need) {
      int best = -1;
      for (size_t i = 0; i < free_slots.size(); ++i) {  // smallest free slot that fits
        const int s = free_slots[i];
        if (slot_elems[s] >= need && (best < 0 || slot_elems[s] < slot_elems[free_slots[best]]))
          best = static_cast<int>(i);
      }
      if (best < 0 && !free_slots.empty()) {  // else grow the largest free one
        best = 0;
        for (size_t i = 1; i < free_slots.size(); ++i)
          if (slot_elems[free_slots[i]] > slot_elems[free_slots[best]]) best = static_cast<int>(i);
      }
      if (best < 0) {
        slot_elems.push_back(need);
        return static_cast<int>(slot_elems.size()) - 1;
      }
      const int s = free_slots[best];
      free_slots.erase(free_slots.begin() + best);
      slot_elems[s] = std::max(slot_elems[s], need);
      return s;
    };
    for (int k = 0; k < nn; ++k) {
      const Node& n = g.node(k);
      Step st;
      st.node = k;
      const int y = n.outputs[0];
      const bool all_blocked =
          std::all_of(n.inputs.begin(), n.inputs.end(), [&](int t) { return layout[t] != 0; });
      const bool x_blocked = !n.inputs.empty() && layout[n.inputs[0]] != 0;
      int out_layout = 0;
      switch (n.op) {
        case OpKind::kConv:
          if (convs[k]->blocked_capable()) {
            st.mode = Mode::kConv;
            out_layout = convs[k]->full_dst_block(layout[n.inputs[0]], threads);
          }
          break;
        case OpKind::kMaxPool:
        case OpKind::kAveragePool:
        case OpKind::kActivation:
        case OpKind::kAffine:
        case OpKind::kResize:
        case OpKind::kGlobalAveragePool:
          if (x_blocked) st.mode = Mode::kBlocked;
          break;
        case OpKind::kAdd:
        case OpKind::kMul:
          if (spatial(g.tensor(y).shape) &&
              (n.inputs.size() == 2 ? all_blocked
                                    : x_blocked && (n.weight.numel() == 1 ||
                                                    n.weight.numel() == g.tensor(y).shape[1])))
            st.mode = Mode::kBlocked;
          break;
        case OpKind::kConcat:
          if (all_blocked && spatial(g.tensor(y).shape) &&
              std::all_of(n.inputs.begin(), n.inputs.end(),
                          [&](int t) { return g.tensor(t).shape[1] % block == 0; }))
            st.mode = Mode::kBlocked;
          break;
        case OpKind::kSplit:
          if (x_blocked && std::all_of(n.outputs.begin(), n.outputs.end(),
                                       [&](int t) { return g.tensor(t).shape[1] % block == 0; }))
            st.mode = Mode::kBlocked;
          break;
        default:
          break;
      }
      if (st.mode == Mode::kBlocked) out_layout = n.op == OpKind::kGlobalAveragePool ? 0 : block;
      if (st.mode == Mode::kPlain) {
        for (int t : n.inputs)
          if (layout[t] && shadow[t] < 0) {
            shadow[t] = take(g.tensor(t).shape.numel());
            st.to_plain.push_back(t);
          }
      }
      // Outputs: in place over a dying input where the kernel allows it, else a slot.
      int over = -1;
      if (st.mode == Mode::kConv && n.inputs.size() == 2 && n.inputs[1] != n.inputs[0])
        over = n.inputs[1];
      if (st.mode == Mode::kBlocked && n.op != OpKind::kResize && n.op != OpKind::kConcat &&
          n.op != OpKind::kSplit && n.op != OpKind::kMaxPool && n.op != OpKind::kAveragePool &&
          n.op != OpKind::kGlobalAveragePool)
        over = n.inputs[0];
      const bool reuse = !keep_all && over >= 0 && last_use[over] == k && slot[over] >= 0 &&
                         !is_output[over] && layout[over] == out_layout &&
                         g.tensor(over).shape == g.tensor(y).shape;
      for (int t : n.outputs) {
        layout[t] = spatial(g.tensor(t).shape) ? out_layout : 0;
        blocked_count += layout[t] != 0;
        stats.naive_bytes += elems(t, layout[t]) * 4;
        if (reuse && t == y) {
          slot[t] = slot[over];
        } else if (is_output[t] && layout[t] == 0) {
          fresh[t] = 1;
        } else {
          slot[t] = take(elems(t, layout[t]));
        }
      }
      if (!keep_all) {
        std::vector<int> dying;
        for (int t : n.inputs)
          if (last_use[t] == k && !is_output[t] &&
              std::find(dying.begin(), dying.end(), t) == dying.end())
            dying.push_back(t);
        for (int t : dying) {
          if (slot[t] >= 0 && !(reuse && t == over)) free_slots.push_back(slot[t]);
          if (shadow[t] >= 0) free_slots.push_back(shadow[t]);
        }
      }
      steps.push_back(std::move(st));
    }
    stats.slots = static_cast<int>(slot_elems.size());
    for (int64_t e : slot_elems) stats.planned_bytes += e * 4;
    slots.resize(slot_elems.size());
    for (size_t s = 0; s < slots.size(); ++s)
      slots[s] = Tensor::empty({std::max<int64_t>(slot_elems[s], 1)}, DType::kF32);
  }

  // NCHW tensor of slot s holding `shape`.
  Tensor slot_view(int s, const Shape& shape) {
    return slots[s].slice(0, 0, shape.numel()).reshape(shape);
  }

  // Copies tensor data `src` in layout `from` into `dst` in layout `to`.
  void convert(int t, const float* src, int from, float* dst, int to) {
    if (from == to) {
      if (src != dst) std::memcpy(dst, src, static_cast<size_t>(elems(t, from)) * sizeof(float));
    } else if (to) {
      to_blocked(src, dims(t), dst, threads);
    } else {
      to_plain(src, dims(t), dst, threads);
    }
  }

  std::vector<Tensor> run(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                          std::vector<double>* times) {
    const size_t nt = g.tensors().size();
    std::vector<float*> data(nt, nullptr);
    std::vector<Tensor> held(nt);  // inputs and per-run outputs
    for (size_t i = 0; i < inputs.size(); ++i) {
      const int t = g.inputs()[i];
      held[t] = inputs[i].contiguous();
      data[t] = static_cast<float*>(held[t].raw_data());
    }
    for (size_t t = 0; t < nt; ++t) {
      if (fresh[t]) {
        held[t] = Tensor::empty(g.tensor(static_cast<int>(t)).shape, DType::kF32);
        data[t] = held[t].data<float>();
      } else if (slot[t] >= 0) {
        data[t] = slots[slot[t]].data<float>();
      }
    }
    // The NCHW tensor of t: itself, or its NCHW copy.
    auto plain = [&](int t) {
      const Shape& s = g.tensor(t).shape;
      if (layout[t]) return slot_view(shadow[t], s);
      if (held[t].defined()) return held[t];
      return slot_view(slot[t], s);
    };
    for (const Step& st : steps) {
      const auto t0 = std::chrono::steady_clock::now();
      const Node& n = g.node(st.node);
      for (int t : st.to_plain) to_plain(data[t], dims(t), slots[shadow[t]].data<float>(), threads);
      const int y = n.outputs[0];
      switch (st.mode) {
        case Mode::kConv: {
          if (n.inputs.size() == 2)  // the residual goes into the destination first
            convert(y, data[n.inputs[1]], layout[n.inputs[1]], data[y], layout[y]);
          const int x = n.inputs[0];
          convs[st.node]->run_full(data[x], layout[x], data[y], threads);
          break;
        }
        case Mode::kBlocked:
          run_blocked(n, data);
          break;
        case Mode::kPlain: {
          std::vector<View> in;
          for (int t : n.inputs)
            in.push_back({plain(t), full_region(g.tensor(t).shape), g.tensor(t).shape});
          std::vector<Tensor> ys;
          Region out;
          for (int t : n.outputs) {
            ys.push_back(plain(t));
            out = hull(out, full_region(g.tensor(t).shape));
          }
          dispatch(n, convs[st.node].get(), in, out, ys, threads);
          break;
        }
      }
      if (times)
        (*times)[st.node] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
    }
    auto export_plain = [&](int t) {
      if (!layout[t]) return held[t].defined() ? held[t] : plain(t).clone();
      Tensor o = Tensor::empty(g.tensor(t).shape, DType::kF32);
      to_plain(data[t], dims(t), o.data<float>(), threads);
      return o;
    };
    if (kept) {
      kept->assign(nt, Tensor());
      for (size_t t = 0; t < nt; ++t)
        if (data[t]) (*kept)[t] = export_plain(static_cast<int>(t));
    }
    std::vector<Tensor> out;
    for (int t : g.outputs()) out.push_back(export_plain(t));
    return out;
  }

  void run_blocked(const Node& n, std::vector<float*>& data) {
    const int x = n.inputs[0], y = n.outputs[0];
    switch (n.op) {
      case OpKind::kMaxPool:
      case OpKind::kAveragePool:
        pool_blocked(n, data[x], dims(x), data[y], dims(y), threads);
        break;
      case OpKind::kGlobalAveragePool:
        global_average_pool_blocked(data[x], dims(x), data[y], threads);
        break;
      case OpKind::kAdd:
      case OpKind::kMul:
        binary_blocked(n, data[x], n.inputs.size() == 2 ? data[n.inputs[1]] : nullptr, dims(x),
                       data[y], threads);
        break;
      case OpKind::kActivation:
        activation_blocked(n.act, data[x], dims(x), data[y], threads);
        break;
      case OpKind::kAffine:
        affine_blocked(n, data[x], dims(x), data[y], threads);
        break;
      case OpKind::kResize:
        resize_blocked(n, data[x], dims(x), data[y], dims(y), threads);
        break;
      case OpKind::kConcat: {
        std::vector<const float*> xs;
        std::vector<BDims> xds;
        for (int t : n.inputs) {
          xs.push_back(data[t]);
          xds.push_back(dims(t));
        }
        concat_blocked(xs, xds, data[y], dims(y), threads);
        break;
      }
      case OpKind::kSplit: {
        std::vector<float*> ys;
        std::vector<BDims> yds;
        for (int t : n.outputs) {
          ys.push_back(data[t]);
          yds.push_back(dims(t));
        }
        split_blocked(data[x], dims(x), ys, yds, threads);
        break;
      }
      default:
        throw InvalidArgument(cat("cnn blocked run: node '", n.name, "' (", op_name(n.op),
                                  ") has no blocked kernel"));
    }
  }
};

BlockedRunner::BlockedRunner(const Graph& g, std::vector<std::unique_ptr<ConvKernel>>& convs,
                             int threads, bool keep_all)
    : impl_(std::make_unique<Impl>(g, convs, threads, keep_all)) {
  impl_->plan();
}

BlockedRunner::~BlockedRunner() = default;

std::vector<Tensor> BlockedRunner::run(const std::vector<Tensor>& inputs, std::vector<Tensor>* kept,
                                       std::vector<double>* times) {
  return impl_->run(inputs, kept, times);
}

const MemoryPlan& BlockedRunner::stats() const { return impl_->stats; }
int BlockedRunner::blocked_tensors() const { return impl_->blocked_count; }

std::vector<char> BlockedRunner::blocked_nodes() const {
  std::vector<char> out(impl_->g.nodes().size(), 0);
  for (const Step& st : impl_->steps) out[st.node] = st.mode != Mode::kPlain;
  return out;
}

}  // namespace tandem::cnn::kernels
