// The all-cores lock of Note [Thread budget] (kernels/dispatch.h): whoever
// holds it runs on every core, so no two such kernels ever run at once.
// Dispatch takes it around `uses_all_cores` kernels; parallel_for
// (kernels/cpu/parallel.h) takes it around a loop it splits over the cores.
// Internal to kernels/.
//
//   {
//     AllCoresLock lock;  // Waits until no other kernel uses every core.
//     ...                 // Run on every core.
//   }
#pragma once

namespace tandem::kernels {

// Re-entrant per thread: a thread that already holds the lock (a
// uses_all_cores kernel that calls parallel_for) passes straight through
// instead of waiting for itself, and only the outermost scope releases it.
class AllCoresLock {
 public:
  AllCoresLock();
  ~AllCoresLock();
  AllCoresLock(const AllCoresLock&) = delete;
  AllCoresLock& operator=(const AllCoresLock&) = delete;

 private:
  bool outermost_;
};

}  // namespace tandem::kernels
