// WorkerPool: the threads that run one device's ready ops, and their queue.
// Internal to the threaded engine.
//
// Note [Waking workers]
// Waking a sleeping thread costs a futex call on both sides (microseconds on
// a virtual machine), far more than a small op. So:
// * A worker that runs out of work first polls the queue for a while
//   (kSpinNanos) before it sleeps. At most one worker polls at a time: on a
//   machine with as many workers as cores, a second poller would take the
//   core the frontend needs to push.
// * A worker about to run an op makes sure somebody else can take the next
//   one: if no worker polls and one sleeps, it wakes it (`keep_a_poller`).
//   So an op pushed while every awake worker is busy, even with one long op,
//   is picked up at once, and the cost of the wake-up lands on a worker.
// * `submit` (the frontend's push) makes a system call only when every
//   worker is asleep; otherwise an awake worker, or the poller it keeps,
//   takes the op.
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

  WorkerPool(Device device, int num_workers, Runner runner);
  ~WorkerPool();  // Joins the workers; the queue must be empty by then.

  void submit(OpRecord* op);
  int size() const { return static_cast<int>(threads_.size()); }

 private:
  static constexpr int64_t kSpinNanos = 50'000;

  void work(int index);
  OpRecord* next_op();  // Null once the pool is stopping.
  OpRecord* try_pop();
  // Polls the queue for up to kSpinNanos; null if nothing came.
  OpRecord* poll();
  // Wakes a sleeper to poll if none polls; see Note [Waking workers].
  void keep_a_poller();
  void wake_one();

  const Device device_;
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
