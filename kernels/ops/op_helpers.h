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

// A rank-0 tensor holding `value` converted to `dtype` (a constant operand
// for broadcasting ops).
Tensor scalar_tensor(double value, DType dtype);

// The single-input op's TensorMeta checks shared by many families.
void check_floating(const char* what, DType dtype);

}  // namespace tandem::kernels
