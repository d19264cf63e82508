#include "kernels/ops/op_helpers.h"

#include <cmath>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/element_cast.h"

namespace tandem::kernels {

std::source_location enclosing_call_site(const std::source_location& fallback) {
  const CallSite& site = current_call_site();
  return site.where.line() != 0 ? site.where : fallback;
}

Tensor zeros(const Shape& shape, DType dtype, Device device, std::source_location fallback) {
  return op("zeros", {},
            {{"shape", std::vector<int64_t>(shape.begin(), shape.end())},
             {"dtype", dtype},
             {"device", device.to_string()}},
            fallback);
}

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

void check_floating(const char* what, DType dtype) {
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, what,
               " must be float32 or float64, got ", dtype_name(dtype));
}

}  // namespace tandem::kernels
