#include "core/engine/worker_pool.h"

#include <chrono>
#include <system_error>

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tandem::engine {

WorkerPool::WorkerPool(Device device, int num_workers, Runner runner)
    : device_(device), num_workers_(num_workers), runner_(std::move(runner)), ring_(1024) {
  start_threads();
}

WorkerPool::~WorkerPool() { stop_threads(); }

void WorkerPool::start_threads() {
  threads_.reserve(num_workers_);
  for (int i = 0; i < num_workers_; ++i) {
    try {
      threads_.emplace_back([this, i] { work(i); });
    } catch (const std::system_error& e) {
      stop_threads();
      throw Error(str_cat("cannot start ", device_.to_string(), " worker thread ", i + 1, " of ",
                          num_workers_, ": ", e.what()));
    }
  }
}

void WorkerPool::stop_threads() {
  stopping_.store(true);
  wake_epoch_.fetch_add(1);
  wake_epoch_.notify_all();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  stopping_.store(false);
}

void WorkerPool::submit(OpRecord* op) {
  {
    std::lock_guard lock(queue_mu_);
    if (head_ - tail_ == ring_.size()) {
      // Full: unroll into a ring twice the size.
      std::vector<OpRecord*> bigger(ring_.size() * 2);
      for (size_t i = tail_; i != head_; ++i) bigger[i - tail_] = ring_[i % ring_.size()];
      head_ -= tail_;
      tail_ = 0;
      ring_.swap(bigger);
    }
    ring_[head_++ % ring_.size()] = op;
  }
  queued_.fetch_add(1);
  // See Note [Waking workers]. The seq_cst order of `queued_` here and of
  // `sleeping_` in next_op() means that either this thread sees that every
  // worker is asleep, or the last worker to fall asleep sees the op.
  if (spinning_.load() == 0 && sleeping_.load() == size()) wake_one();
}

void WorkerPool::share_work() {
  if (queued_.load(std::memory_order_relaxed) > 0 &&
      spinning_.load(std::memory_order_relaxed) == 0 &&
      sleeping_.load(std::memory_order_relaxed) > 0) {
    wake_one();
  }
}

void WorkerPool::wake_one() {
  wake_epoch_.fetch_add(1);
  wake_epoch_.notify_one();
}

OpRecord* WorkerPool::try_pop() {
  if (queued_.load(std::memory_order_relaxed) == 0) return nullptr;
  std::lock_guard lock(queue_mu_);
  if (head_ == tail_) return nullptr;
  queued_.fetch_sub(1);
  return ring_[tail_++ % ring_.size()];
}

OpRecord* WorkerPool::poll() {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(kSpinNanos);
  for (int round = 1;; ++round) {
    if (OpRecord* op = try_pop()) return op;
    if (stopping_.load(std::memory_order_relaxed)) return nullptr;
    cpu_relax();
    if (round % 256 == 0) {
      if (std::chrono::steady_clock::now() > deadline) return nullptr;
      std::this_thread::yield();
    }
  }
}

OpRecord* WorkerPool::next_op() {
  for (;;) {
    if (OpRecord* op = try_pop()) return op;
    int no_spinner = 0;
    if (spinning_.compare_exchange_strong(no_spinner, 1)) {
      OpRecord* op = poll();
      // Register as a sleeper before giving up the spinner role, so that a
      // submit in between sees one or the other and wakes somebody.
      if (op == nullptr) sleeping_.fetch_add(1);
      spinning_.store(0);
      if (op != nullptr) return op;
    } else {
      sleeping_.fetch_add(1);
    }
    uint32_t epoch = wake_epoch_.load();
    if (queued_.load() == 0 && !stopping_.load()) wake_epoch_.wait(epoch);
    sleeping_.fetch_sub(1);
    if (stopping_.load() && queued_.load() == 0) return nullptr;
  }
}

void WorkerPool::work(int index) {
  profiler::set_thread_name(str_cat(device_.to_string(), " worker ", index));
  RunContext context{device_, index};
  if (device_.is_cuda()) {
    cuda::set_device(device_.index());
    context.stream = cuda::stream(device_.index());
  }
  while (OpRecord* op = next_op()) {
    while (op) {
      share_work();
      op = runner_(op, context);
    }
  }
}

}  // namespace tandem::engine
