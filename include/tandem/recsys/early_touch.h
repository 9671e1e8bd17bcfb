// SPDX-License-Identifier: Apache-2.0
// Early touch of admitted queries' embedding rows on the CPU executor (the recsys spec §2.8: with
// no GPU cache level, the host table is primary and prefetch becomes an early touch of mmap-backed
// rows on a separate queue; ablation B7). A query's keys are known when it is submitted, before a
// scheduler runs its lookups: a background thread reads their pages (RecModel::touch), so the
// page faults of a table mapped from disk (`rec-serve --table-dir`) are taken off the lookup's
// critical path while the query waits in its queue.
//
// with_early_touch(inner, model) wraps any policy: submit posts the query to the toucher, then
// hands it to `inner` unchanged (results, order and errors are inner's). The toucher's queue is
// bounded: when it is full a query is not touched (counted as skipped), never delayed.
//
//   auto policy = tandem::rec::with_early_touch(tandem::rec::make_policy(model, ex, po), model);
//   auto stats = tandem::rec::run_load(*policy, pool, lo);   // policy->stats()["early_touch"]
//
// Thread-safety: submit may be called from any number of threads.
#pragma once

#include <memory>

#include "tandem/export.h"
#include "tandem/recsys/model.h"
#include "tandem/recsys/serving.h"

namespace tandem::rec {

struct EarlyTouchOptions {
  int max_queued = 256;  // queries waiting to be touched; more are skipped
};

// stats() adds {"early_touch": {"queries", "skipped", "pages", "touch_ms"}} to inner's.
// InvalidArgument for max_queued < 1.
TANDEM_API std::unique_ptr<ServingPolicy> with_early_touch(std::unique_ptr<ServingPolicy> inner,
                                                           const RecModel& model,
                                                           const EarlyTouchOptions& options = {});

}  // namespace tandem::rec
