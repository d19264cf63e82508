#include "kernels/scalar.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/element_cast.h"

namespace tandem::kernels {

void check_value_fits(std::string_view what, double value, DType dtype) {
  if (is_floating_point(dtype) || dtype == DType::kBool) return;
  visit_numeric(dtype, [&]<class T>() {
    TANDEM_CHECK(in_range<T>(value) && value == std::trunc(value), what, " ", value,
                 " is not a value of ", dtype_name(dtype));
  });
}

Tensor scalar_tensor(double value, DType dtype) {
  check_value_fits("the scalar", value, dtype);
  Tensor t = Tensor::empty(Shape{}, dtype);
  // The tensor is brand new: no op can be using it yet, so write it directly.
  visit_all(dtype, [&]<class T>() { *t.data<T>() = convert<T>(value); });
  return t;
}

}  // namespace tandem::kernels
