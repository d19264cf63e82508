// parallel_for: runs an elementwise loop on every core when it is large
// enough to pay for waking them, within the thread budget (Note [Thread
// budget] in kernels/dispatch.h). Internal to kernels/.
//
//   parallel_for(n, kCheapGrain, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
//   });
//
// `body(begin, end)` is called on disjoint ranges that together cover [0, n)
// exactly once, possibly from several threads at once. The whole range runs
// inline, as body(0, n) on the calling thread and without locking, when it
// holds fewer than 2 * grain elements, when OpenMP has one thread, or when
// the call comes from inside a parallel region (a nested call never starts
// a second region). Otherwise parallel_for takes the all-cores lock
// (kernels/thread_budget.h; a kernel that holds it already passes through)
// and gives each of at most n / grain OpenMP threads one contiguous range.
// If body throws, the first exception is rethrown on the caller once every
// range has finished.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tandem::kernels {

// Grains, measured on the 2-core development machine (see Note [Thread
// budget]): below 2 * grain elements, waking the second core costs about as
// much as it saves.
// Memory-bound loops: add, mul, relu, cast, comparisons.
inline constexpr int64_t kCheapGrain = 65536;
// Loops that call libm for each element: exp, log, tanh, erf, gelu, pow.
inline constexpr int64_t kCostlyGrain = 8192;

// `grain` must be positive; n may be zero.
void parallel_for(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> body);

// The grain of an elementwise functor: its `kGrain` if it declares one,
// else kCheapGrain.
template <class F>
constexpr int64_t grain_for() {
  if constexpr (requires { F::kGrain; }) {
    return F::kGrain;
  } else {
    return kCheapGrain;
  }
}

}  // namespace tandem::kernels
