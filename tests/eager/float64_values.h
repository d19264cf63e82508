// Helpers for tests that compare a module with a float64 loop: a tensor's
// values as doubles, an element-by-element comparison that names the first
// element off, and a gradient checked against central differences.
#pragma once

#include <cmath>
#include <functional>
#include <vector>

#include "gtest/gtest.h"

#include "core/tensor.h"
#include "eager/ops.h"

namespace tandem::testing {

using Values = std::vector<double>;

inline Values values_of(const Tensor& t) { return cast(t, DType::kFloat64).to_vector<double>(); }

// |got - want| <= tolerance * (1 + |want|) for every element.
inline void expect_near(const Values& got, const Values& want, double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::abs(want[i]))) << "element " << i;
  }
}

// d/dx of sum(f(x) * cotangent), for a random cotangent, by autograd and by
// central differences, element by element; `x` is float64.
inline void check_gradient(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  const Shape out = f(x).shape();
  Tensor cotangent = randn(Dims(out.begin(), out.end()), DType::kFloat64);
  Tensor leaf = add(x, 0.0).requires_grad_();
  sum(mul(f(leaf), cotangent)).backward();
  const Values base = values_of(x), grad = values_of(leaf.grad());
  for (size_t e = 0; e < base.size(); ++e) {
    Values up = base, down = base;
    up[e] += 1e-6, down[e] -= 1e-6;
    const auto value = [&](const Values& v) {
      return sum(mul(f(Tensor::from_vector(v, x.shape())), cotangent)).item<double>();
    };
    EXPECT_NEAR(grad[e], (value(up) - value(down)) / 2e-6, 1e-6) << "element " << e;
  }
}

}  // namespace tandem::testing
