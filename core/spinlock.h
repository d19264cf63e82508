// Spinlock: a lock for critical sections of a few instructions.
//
// Note [Why spin]
// The engine's locks (a var's queue, a worker pool's queue, the allocator's
// free lists) are held for a handful of instructions but taken by the
// frontend and the workers at the same moments. A contended std::mutex puts
// the loser to sleep in the kernel and the winner pays a futex wake on
// unlock; on virtual machines each of those system calls costs microseconds,
// more than the op being scheduled. Spinning for the few nanoseconds the
// holder needs is far cheaper. If the holder was preempted, the waiter yields
// its core after a while instead of burning its whole time slice.
//
// Use it like std::mutex: `std::lock_guard lock(spinlock_);`.
#pragma once

#include <atomic>
#include <thread>

namespace tandem {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

class Spinlock {
 public:
  void lock() {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      // Test before test-and-set, so waiters spin on a shared cache line.
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() { return !locked_.exchange(true, std::memory_order_acquire); }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  static constexpr int kSpinsBeforeYield = 1000;
  std::atomic<bool> locked_{false};
};

}  // namespace tandem
