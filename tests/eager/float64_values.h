// Helpers for tests that compare a module with a float64 loop: a tensor's
// values as doubles, and an element-by-element comparison that names the
// first element off.
#pragma once

#include <cmath>
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

}  // namespace tandem::testing
