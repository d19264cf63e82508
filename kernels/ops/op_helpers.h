// Helpers for writing op families: calling other ops from a gradient, and
// constants. Internal to kernels/.
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/dispatch.h"

namespace tandem::kernels {

// One call of a single-output op, for gradient formulas:
//   return {op("mul", {g, b}), op("mul", {g, a})};
inline Tensor op(std::string_view name, std::initializer_list<Tensor> inputs,
                 const Attrs& attrs = {}) {
  return call1(name, absl::Span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}

// Checks that `value` is a value of `dtype`, before a kernel converts it
// (Note [Cast semantics] in kernels/element_cast.h): for an integer dtype,
// an integer within its range, so NaN, infinities, fractions and values
// beyond the range are refused, naming `what`, the value and the dtype. Any
// value suits a floating dtype or bool.
void check_value_fits(std::string_view what, double value, DType dtype);

// A rank-0 tensor holding `value` in `dtype` (a constant operand for
// broadcasting ops); check_value_fits("the scalar", ...) first.
Tensor scalar_tensor(double value, DType dtype);

// The single-input op's TensorMeta checks shared by many families.
void check_floating(const char* what, DType dtype);

}  // namespace tandem::kernels
