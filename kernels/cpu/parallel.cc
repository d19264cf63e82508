#include "kernels/cpu/parallel.h"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <mutex>

#include "core/error.h"
#include "kernels/thread_budget.h"

namespace tandem::kernels {
namespace {

// Ranges start at multiples of this many elements, so that two threads
// never write one 64-byte cache line (for elements of up to 4 bytes).
constexpr int64_t kAlign = 16;

}  // namespace

void parallel_for(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> body) {
  TANDEM_INTERNAL_ASSERT(grain > 0, "parallel_for grain must be positive, got ", grain);
  if (n <= 0) return;
  int64_t threads = std::min<int64_t>(omp_get_max_threads(), n / grain);
  if (threads < 2 || omp_in_parallel()) {
    body(0, n);
    return;
  }
  AllCoresLock lock;  // See Note [Thread budget].
  std::exception_ptr error;
  std::mutex error_mu;
#pragma omp parallel num_threads(threads)
  {
    // The team may be smaller than asked for (OMP_DYNAMIC, thread limits),
    // so the ranges follow the team that actually runs.
    int64_t team = omp_get_num_threads();
    int64_t chunk = ((n + team - 1) / team + kAlign - 1) / kAlign * kAlign;
    int64_t begin = omp_get_thread_num() * chunk;
    int64_t end = std::min(n, begin + chunk);
    if (begin < end) {
      // An exception must not leave an OpenMP region (that terminates).
      try {
        body(begin, end);
      } catch (...) {
        std::lock_guard guard(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tandem::kernels
