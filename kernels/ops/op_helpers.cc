#include "kernels/ops/op_helpers.h"

#include <cstring>

#include "kernels/cpu/dtype_visit.h"

namespace tandem::kernels {

Tensor scalar_tensor(double value, DType dtype) {
  Tensor t = Tensor::empty(Shape{}, dtype);
  // The tensor is brand new: no op can be using it yet, so write it directly.
  visit_all(dtype, [&]<class T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      *t.data<T>() = T(static_cast<float>(value));
    } else {
      *t.data<T>() = static_cast<T>(value);
    }
  });
  return t;
}

void check_floating(const char* what, DType dtype) {
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, what,
               " must be float32 or float64, got ", dtype_name(dtype));
}

}  // namespace tandem::kernels
