// SPDX-License-Identifier: Apache-2.0
// QueryTensors (tensor_lifetimes.h): blocks at issue of a producer, fences and the deferred free.
#include "recsys/tensor_lifetimes.h"

#include <algorithm>

#include "tandem/core/error.h"

namespace tandem::rec {

QueryTensors::QueryTensors(Executor& ex, const std::vector<std::vector<int>>& consumers,
                           const std::vector<size_t>& bytes, QueryState& st)
    : ex_(ex), st_(st), bytes_(bytes), life_(consumers.size()) {
  TANDEM_CHECK(bytes.size() == consumers.size()) << "one output size per node";
  st_.outputs.assign(consumers.size(), OutputBlock{});
  for (size_t i = 0; i < consumers.size(); ++i)
    life_[i].pending = bytes_[i] > 0 ? static_cast<int>(consumers[i].size()) : 0;
}

void QueryTensors::produce(int i, int stream) {
  Life& t = life_[static_cast<size_t>(i)];
  if (t.pending == 0) return;  // an output nobody in the query reads: host buffer
  const size_t n = bytes_[static_cast<size_t>(i)];
  t.producer = stream;
  st_.outputs[static_cast<size_t>(i)] = {ex_.alloc_async(n, stream), n};
}

void QueryTensors::consumed(int u, int stream, std::shared_ptr<Event> done) {
  Life& t = life_[static_cast<size_t>(u)];
  if (t.producer < 0) return;  // no block
  auto f = std::find_if(t.fences.begin(), t.fences.end(),
                        [stream](const StreamFence& x) { return x.stream == stream; });
  if (f == t.fences.end())
    t.fences.push_back({stream, std::move(done)});
  else
    f->event = std::move(done);
  if (--t.pending > 0) return;
  OutputBlock& b = st_.outputs[static_cast<size_t>(u)];
  const int sp = t.producer;
  if (std::all_of(t.fences.begin(), t.fences.end(),
                  [sp](const StreamFence& x) { return x.stream == sp; }))
    ex_.free_async(b.data, b.bytes, sp);
  else
    ex_.free_after(b.data, b.bytes, sp, t.fences);
  t.fences.clear();
  t.producer = -1;
}

}  // namespace tandem::rec
