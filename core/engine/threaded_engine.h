// ThreadedEngine: the asynchronous implementation of Engine.
// See engine.h for the contract and var.h for the dependency queue.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/event_watcher.h"
#include "core/engine/op_record.h"
#include "core/engine/var.h"
#include "core/engine/worker_pool.h"
#include "core/error.h"
#include "core/spinlock.h"

namespace tandem::engine {

class ThreadedEngine final : public Engine {
 public:
  explicit ThreadedEngine(EngineOptions options);
  ~ThreadedEngine() override;

  void wait_for_memory() override;
  void wait(Var* var) override;
  void wait_all() override;
  void delete_var(Var* var, OpFn on_delete) override;
  void shutdown(ShutdownMode mode) override;
  void shutdown_at_exit() override;
  EngineKind kind() const override { return EngineKind::kThreaded; }
  int num_workers(Device device) const override;
  bool run_if_free(absl::FunctionRef<void(const RunContext&)> fn, VarSpan reads, VarSpan writes,
                   const char* name, const std::source_location& where) override;

 protected:
  void push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
               const std::source_location& where) override;

 private:
  // Around fork(), for every live ThreadedEngine; see Note [Engines across
  // fork].
  static void prepare_fork_all();
  static void after_fork_all_in_parent();
  static void after_fork_all_in_child();
  void prepare_fork();
  void after_fork(bool in_child);

  // push() without the shutdown check, for an op already counted in
  // pending_ops_.
  void enqueue(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
               const std::source_location& where);
  // Registers `op`, already counted in pending_ops_, with its vars; it is
  // dispatched once none of them blocks it.
  void schedule(OpRecord* op);
  // One op fewer pending, `bytes` fewer in flight; wakes whoever waits for
  // that (wait_all, shutdown, throttle).
  void release_pending(int64_t bytes);
  // Refuses pushes from now on, giving `reason`; false if already stopped.
  bool stop(const char* reason);
  // Waits until no op runs inline and none is pending.
  void finish_pending();
  void end_inline_run();
  // Sends a ready op to its device's workers (or runs a wait op inline).
  void dispatch(OpRecord* op);
  // Runs a ready op on a worker; returns a successor for the same worker.
  OpRecord* run(OpRecord* op, const RunContext& context);
  // Finishes a GPU op whose event has fired (Note [GPU ops complete at
  // launch]), or an op whose Completion came (Note [Ops that finish later]
  // in engine.h); `failure`: it failed meanwhile.
  void complete_after_event(OpRecord* op, std::shared_ptr<const Error> failure);
  class OpDeferral;
  // Releases the op's vars and dispatches what that unblocks; returns one
  // unblocked op on `continue_on` for the caller to run next, if any.
  OpRecord* complete(OpRecord* op, const Device* continue_on);
  void finish_wait(OpRecord* op);
  // Blocks the pushing thread while too many ops or bytes are in flight; see
  // Note [Bounded run-ahead].
  bool over_bound() const;
  bool at_resume_level() const;
  void throttle();
  // Records a new failure (not one inherited from an input).
  void note_failure(const std::shared_ptr<const Error>& failure);
  [[noreturn]] void throw_failure(const std::shared_ptr<const Error>& failure);
  // The workers of `device`; throws tandem::Error naming `where` for a
  // device this machine does not have.
  WorkerPool& pool_for(Device device, const std::source_location& where);
  // After a wait: waits for the GPU work launched on `device` so far.
  void synchronize_device(Device device);

  std::unique_ptr<WorkerPool> cpu_pool_;
  // One worker and one event watcher per CUDA device, by index.
  std::vector<std::unique_ptr<WorkerPool>> cuda_pools_;
  std::vector<std::unique_ptr<EventWatcher>> cuda_watchers_;
  // See Note [Bounded run-ahead]; 0: no bound.
  const int64_t max_in_flight_;
  const int64_t resume_in_flight_;
  const int64_t max_bytes_in_flight_;
  const int64_t resume_bytes_in_flight_;
  // Why pushes are refused (Note [Refusing pushes once stopped]); null while
  // the engine runs.
  std::atomic<const char*> stopped_{nullptr};
  std::atomic<bool> cancelling_{false};
  std::atomic<uint64_t> next_op_id_{1};
  // Note [Engines across fork]; touched only by the forking thread.
  bool threads_stopped_for_fork_ = false;
  bool forked_inside_op_ = false;
  bool cuda_lost_in_fork_ = false;
  std::string stop_message_;  // A reason that is not a constant.

  // Written by every push and completion: a line of their own.
  alignas(64) std::atomic<int64_t> pending_ops_{0};
  std::atomic<int64_t> pending_bytes_{0};
  // Pushing threads blocked in throttle().
  std::atomic<int> throttled_{0};
  // Tiny ops running inline now, on pushing threads (Note [Refusing pushes
  // once stopped]); written by those threads only.
  alignas(64) std::atomic<int> inline_runs_{0};

  // Note [Pushing from several threads]
  // Two ops pushed at once from two threads could enter the queues of their
  // shared vars in opposite orders (A before B on x, B before A on y) and
  // then wait for each other forever. An op that touches two or more vars
  // therefore appends to all of them under this lock, so such ops enter every
  // queue in one global order. An op with a single var cannot close a cycle
  // (it would have to be both before and after another op on that one var),
  // so the common single-var push takes no global lock.
  Spinlock multi_var_append_mu_;  // See Note [Why spin] in core/spinlock.h.

  alignas(64) std::mutex failures_mu_;
  // Failures not yet thrown by any wait, oldest first.
  std::vector<std::shared_ptr<const Error>> unreported_;
};

}  // namespace tandem::engine
