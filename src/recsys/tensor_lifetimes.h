// SPDX-License-Identifier: Apache-2.0
// Unified asynchronous tensor management (the recsys spec §2.4) for the op scheduler
// (op_scheduler.cpp): the lifetimes of one query's intermediate tensors (a node's output that
// other nodes of the query read).
//
// Each such tensor T gets, when its producer is issued on stream s_p, a block of the executor's
// stream-ordered pool (alloc_async(bytes, s_p)) that the node writes its output into
// (QueryState::outputs). Its ready event is the producer's completion event, which the scheduler
// already records and makes foreign consumers wait on. As consumers are issued, the event each
// records behind itself becomes f_{T,s} for its stream (the last one issued there covers the
// earlier ones) and the pending-consumer count drops; at 0 the block is freed: free_async on s_p
// when every consumer ran there, else free_after with the f_{T,s} (the pool keeps it on its
// pending list until all have fired: option (a)). The query's output node, and nodes nobody
// reads, keep their own host buffers. Not thread-safe: the scheduler calls it under its lock.
#pragma once

#include <memory>
#include <vector>

#include "tandem/recsys/executor.h"

namespace tandem::rec {

class QueryTensors {
 public:
  // `consumers[i]`: the nodes that read node i (the graph's successors); `bytes[i]`: node i's
  // output bytes for this query. The blocks go into st.outputs.
  QueryTensors(Executor& ex, const std::vector<std::vector<int>>& consumers,
               const std::vector<size_t>& bytes, QueryState& st);
  // Before node i is launched on `stream`: its output block, when others read it.
  void produce(int i, int stream);
  // After a consumer of node u was launched on `stream` with `done` recorded behind it.
  void consumed(int u, int stream, std::shared_ptr<Event> done);

 private:
  struct Life {
    int producer = -1;
    int pending = 0;                  // consumers not issued yet
    std::vector<StreamFence> fences;  // the last consumer's event per stream
  };
  Executor& ex_;
  QueryState& st_;
  std::vector<size_t> bytes_;
  std::vector<Life> life_;
};

}  // namespace tandem::rec
