// The elementwise formulas the CPU runs on float32 with its own vectorizable
// math: erf, gelu and exp (Note [Vectorized formulas]). Internal to
// kernels/.
//
//   if constexpr (cpu::kHasVectorFormula<Op>) {
//     cpu::map_floats(cpu::VectorFormula<Op>{}, in, out, n);
//   }
#pragma once

#include <cstdint>

#include "kernels/cpu/fast_erf.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/elementwise_ops.h"

namespace tandem::kernels::cpu {

// Note [Vectorized formulas]
// libm's erff and expf cost a call per element, and no loop around a call
// vectorizes: in the tutorial's transformer training step, GELU and its
// gradient (erf, and exp for the density) spent 6-7% of the time in erff
// and 2% in expf. So the CPU's unary kernels and fused programs run erf,
// gelu and exp on float32 through the formulas below (fast_erf: within 4e-7
// of erf; exp_full_range: a few ulp of e^x, with libm's overflow and
// underflow), in loops compiled for SSE2 and for AVX2 (Note [Row passes in
// two builds] in kernels/cpu/fast_exp.h): the step went from 80 to 71 ms
// (bench_sequence --child lm --hybridize). The op's kernel and a fused
// program's instruction take the same formula, so eager and hybridized runs
// agree exactly (but for a gelu that activation fusion folds into a linear
// or conv2d of an inference graph: oneDNN's post-op computes that one, to
// within its own rounding); float64, and the CUDA kernels, keep
// elementwise_ops.h's formulas.
template <class Op>
struct VectorFormula;  // Defined for the ops that have one.

template <>
struct VectorFormula<elementwise::Erf> {
  float operator()(float x) const { return fast_erf(x); }
};

template <>
struct VectorFormula<elementwise::Gelu> {
  float operator()(float x) const {
    return x * 0.5f * (1.0f + fast_erf(x * static_cast<float>(elementwise::Gelu::kInvSqrt2)));
  }
};

template <>
struct VectorFormula<elementwise::Exp> {
  float operator()(float x) const { return exp_full_range(x); }
};

template <class Op>
inline constexpr bool kHasVectorFormula = requires {
  sizeof(VectorFormula<Op>);
};

// out[j] = f(in[j]) for j < n; in and out do not overlap.
template <class F>
TANDEM_VECTOR_CLONES void map_floats(F f, const float* __restrict in, float* __restrict out,
                                     int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = f(in[j]);
}

}  // namespace tandem::kernels::cpu
