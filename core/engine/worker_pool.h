// WorkerPool: the threads that run one device's ready ops, and their queue.
// Internal to the threaded engine.
//
// Note [Waking workers]
// Waking a sleeping thread costs a futex call on both sides (microseconds on
// a virtual machine), far more than a small op, so wake-ups are kept off the
// path of a single op and out of the frontend's push where possible:
// * A worker that runs out of work first polls the queue for a while
//   (kSpinNanos) before it sleeps. At most one worker polls at a time: on a
//   machine with as many workers as cores, a second poller would take the
//   core the frontend needs to push. The poller yields every few hundred
//   rounds: after a parallel kernel, OpenMP's helper threads spin on the
//   other cores too, and a frontend just woken from its wait found no core
//   until the next scheduler tick (bench_gemm at n = 256: products of 4 ms
//   in place of 0.1 ms in some runs, and 0.03-0.62x of dnnl_sgemm overall;
//   0.75-0.79x with the yield).
// * `submit` (the frontend's push) wakes a worker only when every worker is
//   asleep; otherwise an awake worker will take the op.
// * A worker about to run an op wakes a sleeper if other ops are queued and
//   no worker polls (`share_work`), so independent ops spread over workers.
// * A frontend about to block in a wait calls `share_work` too: an op it
//   pushed while every awake worker was busy gets a worker of its own.
// What is left: an op pushed while the only awake worker runs a long op
// waits for that op to end, unless the frontend waits first.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/engine/engine.h"
#include "core/spinlock.h"

namespace tandem::engine {

struct OpRecord;

class WorkerPool {
 public:
  // Runs an op; returns the next op the same worker should run at once (a
  // ready successor on the same device), or null.
  using Runner = std::function<OpRecord*(OpRecord*, const RunContext&)>;

  // A CUDA device's workers make it current on their threads and run ops
  // with the device's stream (core/cuda/runtime.h). Throws tandem::Error,
  // having started nothing, when the system refuses a thread.
  WorkerPool(Device device, int num_workers, Runner runner);
  ~WorkerPool();  // Joins the workers; the queue must be empty by then.

  void submit(OpRecord* op);
  // Wakes a sleeper if ops are queued and no worker polls; see Note [Waking
  // workers]. Called by workers, and by the frontend before it blocks.
  void share_work();
  int size() const { return num_workers_; }

  // Joins the workers, keeping the queue (which should be empty), and starts
  // them again: around fork() (Note [Engines across fork] in
  // threaded_engine.cc). start_threads throws tandem::Error as the
  // constructor does.
  void stop_threads();
  void start_threads();

 private:
  static constexpr int64_t kSpinNanos = 50'000;

  void work(int index);
  OpRecord* next_op();  // Null once the pool is stopping.
  OpRecord* try_pop();
  // Polls the queue for up to kSpinNanos; null if nothing came.
  OpRecord* poll();
  void wake_one();

  const Device device_;
  const int num_workers_;
  const Runner runner_;

  Spinlock queue_mu_;
  // A ring buffer: push at head_, pop at tail_; grows, never shrinks, so a
  // steady state allocates nothing.
  std::vector<OpRecord*> ring_;
  size_t head_ = 0;
  size_t tail_ = 0;

  std::atomic<int64_t> queued_{0};
  std::atomic<int> spinning_{0};
  std::atomic<int> sleeping_{0};
  // Bumped to wake sleepers, which wait for it to change (C++20 atomic wait).
  std::atomic<uint32_t> wake_epoch_{0};
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> threads_;
};

}  // namespace tandem::engine
