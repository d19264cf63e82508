// Scalars written into tensors: the check that a double is a value of a
// dtype, and the rank-0 tensor an op function makes of a scalar operand
// (`x + 1`).
#pragma once

#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tandem::kernels {

// Checks that `value` is a value of `dtype`, before a kernel converts it
// (Note [Cast semantics] in kernels/element_cast.h): for an integer dtype,
// an integer within its range, so NaN, infinities, fractions and values
// beyond the range are refused, naming `what`, the value and the dtype. Any
// value suits a floating dtype or bool.
void check_value_fits(std::string_view what, double value, DType dtype);

// A rank-0 tensor holding `value` in `dtype` (a constant operand for
// broadcasting ops); check_value_fits("the scalar", ...) first.
Tensor scalar_tensor(double value, DType dtype);

}  // namespace tandem::kernels
