// SPDX-License-Identifier: Apache-2.0
// CPU streams: serial queues executed by a shared pool of worker threads (see
// tandem/core/stream.h). A stream holds a worker only while it has runnable work; wait() on an
// incomplete event parks the stream (no thread blocks) until the event's record is reached. Waiting
// on a foreign (e.g. CUDA) event enqueues a host function that blocks in that event's
// synchronize().
#pragma once

#include <memory>

#include "tandem/core/stream.h"

namespace tandem::cpu {

std::unique_ptr<Stream> make_stream();
std::unique_ptr<Event> make_event();

}  // namespace tandem::cpu
