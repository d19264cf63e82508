// A vectorizable erf for float32 (kernels/cpu/vector_formulas.h runs the
// erf and gelu ops on it). Internal to kernels/.
#pragma once

#include <algorithm>
#include <cmath>

namespace tandem::kernels::cpu {

// erf(x) in float32 as x P(x^2) / Q(x^2): a rational fit of degrees 6 and 5
// in x^2, weighted toward the largest error, on [0, 3.92], beyond which erf
// rounds to +-1 in float32. Within 4e-7 of erf over every float (about 6
// ulp just below 1, where erf is flat; 1e-8 relative near 0). Branch-free,
// so that the loops calling it vectorize; NaN stays NaN, +-inf gives +-1.
inline float fast_erf(float x) {
  const float a = std::min(std::abs(x), 3.92f);
  const float t = a * a;
  float p = -1.334888301e-08f;
  p = p * t + 4.720347761e-06f;
  p = p * t + 3.804626661e-04f;
  p = p * t + 3.832492204e-03f;
  p = p * t + 5.427997290e-02f;
  p = p * t + 1.846970774e-01f;
  p = p * t + 1.128379181e+00f;
  float q = 6.344309709e-05f;
  q = q * t + 1.305174760e-03f;
  q = q * t + 1.543149467e-02f;
  q = q * t + 1.137758139e-01f;
  q = q * t + 4.970170526e-01f;
  q = q * t + 1.0f;
  return std::copysign(std::min(a * p / q, 1.0f), x);
}
inline double fast_erf(double x) { return std::erf(x); }

}  // namespace tandem::kernels::cpu
