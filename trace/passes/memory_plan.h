// Memory planning: which buffer each intermediate value of a graph lives in.
//
// Liveness-based reuse: walking the nodes in order, a node's outputs take
// buffers freed by values whose last reader has run (best fit, growing the
// largest free buffer when none is big enough), and a value's buffer is freed
// after its last reader. Graph inputs and outputs are not planned: the
// executor binds them on each call. A node never writes a buffer it reads,
// so kernels need not support aliasing; the engine orders the reuse (each
// buffer is one storage with one engine var: a write waits for earlier
// reads of the buffer).
#pragma once

#include <cstddef>
#include <vector>

#include "trace/graph.h"

namespace tandem::trace {

struct MemoryPlan {
  // Per value: its buffer, or -1 for values the executor binds per call.
  std::vector<int> buffer_of;
  std::vector<size_t> buffer_bytes;
  // Bytes of all buffers: the planned peak of intermediates.
  size_t planned_bytes = 0;
  // Bytes if every intermediate had its own buffer (no reuse).
  size_t unplanned_bytes = 0;
};

// With `reuse` false every intermediate value gets its own buffer (for
// comparison and debugging).
MemoryPlan plan_memory(const Graph& graph, bool reuse = true);

}  // namespace tandem::trace
