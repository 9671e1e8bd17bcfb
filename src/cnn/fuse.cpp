// SPDX-License-Identifier: Apache-2.0
// Graph simplification after import: BN folding, SiLU detection, activation fusion.
#include <cmath>
#include <set>

#include "tandem/cnn/onnx_import.h"
#include "tandem/core/error.h"

namespace tandem::cnn {

namespace {

bool is_graph_output(const Graph& g, int t) {
  for (int o : g.outputs())
    if (o == t) return true;
  return false;
}

// The single consumer of tensor t, or -1 (none, several, or t is a graph output).
int sole_consumer(const Graph& g, int t) {
  const auto& c = g.tensor(t).consumers;
  if (c.size() != 1 || is_graph_output(g, t)) return -1;
  return c[0];
}

// Removes the nodes flagged dead and rebuilds the wiring.
void sweep(Graph& g, const std::vector<char>& dead) {
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes().size(); ++i)
    if (!dead[i]) kept.push_back(std::move(g.mutable_nodes()[i]));
  g.mutable_nodes() = std::move(kept);
  g.rewire();
}

// Affine (BN) after a conv whose output nothing else reads: scale the conv's weights and bias.
bool fold_affine(Graph& g) {
  auto& nodes = g.mutable_nodes();
  std::vector<char> dead(nodes.size(), 0);
  bool changed = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& a = nodes[i];
    if (a.op != OpKind::kAffine) continue;
    const int t = a.inputs[0];
    const int p = g.tensor(t).producer;
    if (p < 0 || dead[p] || sole_consumer(g, t) != static_cast<int>(i)) continue;
    Node& c = nodes[p];
    if (c.op != OpKind::kConv || c.act.kind != ActKind::kNone) continue;
    const int64_t o = c.weight.size(0), per = c.weight.numel() / o;
    Tensor w = c.weight.clone();
    Tensor b = Tensor::empty({o}, DType::kF32);
    const float* s = a.weight.data<float>();
    const float* sh = a.bias.defined() ? a.bias.data<float>() : nullptr;
    for (int64_t k = 0; k < o; ++k) {
      float* wk = w.data<float>() + k * per;
      for (int64_t j = 0; j < per; ++j) wk[j] *= s[k];
      const float b0 = c.bias.defined() ? c.bias.data<float>()[k] : 0.0f;
      b.data<float>()[k] = b0 * s[k] + (sh ? sh[k] : 0.0f);
    }
    c.weight = w;
    c.bias = b;
    c.outputs = a.outputs;
    dead[i] = 1;
    changed = true;
  }
  if (changed) sweep(g, dead);
  return changed;
}

// Mul(x, Sigmoid(x)) -> SiLU(x) when the sigmoid feeds only the Mul.
bool find_silu(Graph& g) {
  auto& nodes = g.mutable_nodes();
  std::vector<char> dead(nodes.size(), 0);
  bool changed = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& m = nodes[i];
    if (m.op != OpKind::kMul || m.inputs.size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const int s = m.inputs[side], x = m.inputs[1 - side];
      const int p = g.tensor(s).producer;
      if (p < 0 || dead[p] || sole_consumer(g, s) != static_cast<int>(i)) continue;
      const Node& sig = nodes[p];
      if (sig.op != OpKind::kActivation || sig.act.kind != ActKind::kSigmoid || sig.inputs[0] != x)
        continue;
      m.op = OpKind::kActivation;
      m.act = {ActKind::kSilu, 0.0f, 0.0f};
      m.inputs = {x};
      dead[p] = 1;
      changed = true;
      break;
    }
  }
  if (changed) sweep(g, dead);
  return changed;
}

// An activation right after a conv or gemm whose output nothing else reads becomes a post-op.
bool fuse_activation(Graph& g) {
  auto& nodes = g.mutable_nodes();
  std::vector<char> dead(nodes.size(), 0);
  bool changed = false;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node& a = nodes[i];
    if (a.op != OpKind::kActivation) continue;
    const int t = a.inputs[0];
    const int p = g.tensor(t).producer;
    if (p < 0 || dead[p] || sole_consumer(g, t) != static_cast<int>(i)) continue;
    Node& c = nodes[p];
    if ((c.op != OpKind::kConv && c.op != OpKind::kGemm) || c.act.kind != ActKind::kNone) continue;
    c.act = a.act;
    c.outputs = a.outputs;
    dead[i] = 1;
    changed = true;
  }
  if (changed) sweep(g, dead);
  return changed;
}

}  // namespace

void fuse_graph(Graph& g) {
  fold_affine(g);
  find_silu(g);
  fuse_activation(g);
}

}  // namespace tandem::cnn
