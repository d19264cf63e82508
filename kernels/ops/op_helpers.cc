#include "kernels/ops/op_helpers.h"

#include <utility>

#include "core/error.h"
#include "kernels/known_ops.h"

namespace tandem::kernels {

std::source_location enclosing_call_site(const std::source_location& fallback) {
  const CallSite& site = current_call_site();
  return site.where.line() != 0 ? site.where : fallback;
}

Tensor zeros(const Shape& shape, DType dtype, Device device, std::source_location fallback) {
  return nested_call1(zeros_op(), {},
                      {{"shape", std::vector<int64_t>(shape.begin(), shape.end())},
                       {"dtype", dtype},
                       {"device", device.to_string()}},
                      fallback);
}

Tensor size_scalar(int64_t size, DType dtype, Device device, std::source_location fallback) {
  return nested_call1(full_op(), {},
                      {{"shape", std::vector<int64_t>{}},
                       {"dtype", dtype},
                       {"device", device.to_string()},
                       {"value", static_cast<double>(size)}},
                      fallback);
}

Tensor zeros_like(const Tensor& t, std::source_location fallback) {
  return zeros(t.shape(), t.dtype(), t.device(), fallback);
}

std::string ints_to_string(const std::vector<int64_t>& ints) {
  return attr_to_string(AttrValue(ints));
}

AttrSpec required(std::string name, AttrValue type) {
  return {.name = std::move(name), .default_value = std::move(type), .required = true};
}

AttrSpec optional(std::string name, AttrValue value) {
  return {.name = std::move(name), .default_value = std::move(value)};
}

void check_floating(const char* what, DType dtype) {
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64, what,
               " must be float32 or float64, got ", dtype_name(dtype));
}

}  // namespace tandem::kernels
