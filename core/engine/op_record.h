// OpRecord: everything the threaded engine keeps about one pushed op.
// Internal to the engine; records are pooled (see Note [Why a pool with
// thread-local caches] in object_pool.h), so a push allocates nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <source_location>

#include "absl/container/inlined_vector.h"

#include "core/device.h"
#include "core/engine/engine.h"

namespace tandem::engine {

class ThreadedEngine;
struct WaitState;

struct OpRecord {
  OpFn fn;
  // Most ops touch at most four vars each way; those stay inline.
  absl::InlinedVector<Var*, 4> reads;
  absl::InlinedVector<Var*, 4> writes;
  // Bit i: writes[i] is also an input (an in-place update), so a failure
  // stored on it must skip the op like a failed read would.
  uint64_t written_inputs = 0;
  Device device;
  const char* name = nullptr;
  std::source_location where;
  ThreadedEngine* engine = nullptr;
  // Set only for the engine's own wait ops, which run inline (never queued).
  WaitState* waiter = nullptr;
  uint64_t id = 0;  // Links the push and the execution in a profile.
  // New memory this op writes first (Var::append_write): in flight until it
  // finishes (Note [Bounded run-ahead] in threaded_engine.cc).
  int64_t bytes = 0;
  // Vars that still block the op, plus one held by push until it has
  // registered every var, so the op cannot start half-registered.
  std::atomic<int> blockers{0};

  // Releases one blocker; true when the op may now run.
  bool unblock() { return blockers.fetch_sub(1, std::memory_order_acq_rel) == 1; }
};

}  // namespace tandem::engine
