// Var: the engine's handle on one piece of mutable data (usually a Storage).
//
// Internal to the engine; users hold `Var*` only to name what an op reads and
// writes. A Var keeps the queue of ops waiting on it and the failure, if any,
// of the last op that wrote it.
//
// Note [Dependency queue]
// This is MXNet's ThreadedVar, written anew. Each var has a singly linked list
// of blocks, one per pending op, oldest first, ending in an empty sentinel
// (`tail_`). `pending_write_` points at the oldest write not yet finished.
// Reads that arrive while no write is pending start at once and are only
// counted (`running_reads_`). When the last running read finishes, the
// pending write starts (`running_reads_` becomes kWriteRunning). When a write
// finishes, every read queued behind it up to the next write starts; if there
// are none, the next write starts. So reads run concurrently, writes run alone
// and in push order, and each op starts only once all its vars allow it.
//
// Every method takes the var's own lock for a few instructions; no lock is
// held while an op runs, and the engine never holds two var locks at once.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "absl/container/inlined_vector.h"

#include "core/device.h"
#include "core/error.h"
#include "core/spinlock.h"

namespace tandem::engine {

struct OpRecord;

// Ops whose dependencies became satisfied, to be dispatched by the caller
// after it has released every lock.
using ReadyOps = absl::InlinedVector<OpRecord*, 8>;

class Var {
 public:
  // Vars come from a pool (see object_pool.h); create and destroy them here.
  // `device`: where the data it guards lives; `new_bytes`: its size when it
  // is new memory, which the first op that writes it carries (see
  // append_write) until it finishes.
  static Var* create(Device device = Device::cpu(), size_t new_bytes = 0);
  static void destroy(Var* var);

  Var();
  ~Var();
  Var(const Var&) = delete;
  Var& operator=(const Var&) = delete;

  // Queues `op` as a reader. Returns true if it may read right away.
  bool append_read(OpRecord* op);
  // Queues `op` as a writer. Returns true if it may write right away. The
  // var's new bytes, if no write took them yet, move to `op->bytes`: those
  // bytes are in flight until the op finishes (Note [Bounded run-ahead] in
  // threaded_engine.cc).
  bool append_write(OpRecord* op);
  // Claim the var for a read (a write) that starts now, for an op run
  // without a queue entry (Engine::run_if_free), if nothing blocks it; false,
  // changing nothing, otherwise. Released by complete_read (complete_write).
  bool try_claim_read();
  bool try_claim_write();
  // A read granted earlier has finished. Adds the op this unblocks, if any.
  void complete_read(ReadyOps& ready);
  // The running write has finished. Adds the ops this unblocks to `ready`.
  // Returns true if the var deleted itself (see mark_for_delete).
  bool complete_write(ReadyOps& ready);

  // True when no write is queued or running: a read would start at once.
  bool readable_now();
  // True when no op at all is queued or running on the var.
  bool idle();
  Device device() const { return device_; }
  // Called by the running write of a deletion op: the var deletes itself when
  // that write completes. Nothing may be queued on it afterwards.
  void mark_for_delete() { to_delete_ = true; }

  // The failure of the last op that wrote this var, or null if it succeeded.
  // Only a running writer sets it, but a frontend that found the var readable
  // may read it while a later write (pushed by another thread) already runs:
  // so it has its own lock, which the common case (no failure before or
  // after) never takes.
  std::shared_ptr<const Error> failure() const {
    if (!failed_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(failure_mu_);
    return failure_;
  }
  void set_failure(std::shared_ptr<const Error> failure) {
    if (!failure && !failed_.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(failure_mu_);
    failure_ = std::move(failure);
    failed_.store(failure_ != nullptr, std::memory_order_release);
  }

  struct Block;  // One queued op; defined in var.cc.

 private:
  static constexpr int kWriteRunning = -1;

  Spinlock mu_;  // See Note [Why spin] in core/spinlock.h.
  mutable Spinlock failure_mu_;
  std::atomic<bool> failed_{false};
  std::shared_ptr<const Error> failure_;
  int running_reads_ = 0;  // or kWriteRunning
  Block* tail_;            // Empty sentinel; the next op is attached here.
  Block* pending_write_ = nullptr;
  bool to_delete_ = false;
  Device device_;
  size_t new_bytes_ = 0;  // Until the first write takes them.
};

}  // namespace tandem::engine
