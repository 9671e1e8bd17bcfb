// SPDX-License-Identifier: Apache-2.0
// Model::to: the same model with its weights on another device (see model.h).
#include "tandem/core/backend.h"
#include "tandem/llm/model.h"

namespace tandem::llm {

Model Model::to(Device device) const {
  BackendRegistry::global().get(device);  // NotFound naming the device when it does not exist
  Model m = *this;
  m.device_ = device;
  auto move = [&](Tensor& t) {
    if (t.defined()) t = t.to(device);
  };
  move(m.token_embd_);
  move(m.output_norm_);
  move(m.output_norm_b_);
  move(m.position_embd_);
  m.output_ = output_tied_ ? m.token_embd_ : output_.to(device);
  for (LayerWeights& w : m.layers_) {
    for (Tensor* t :
         {&w.attn_norm, &w.wq, &w.wk, &w.wv, &w.wo, &w.ffn_norm, &w.w_gate, &w.w_up, &w.w_down}) {
      move(*t);
    }
  }
  return m;
}

}  // namespace tandem::llm
