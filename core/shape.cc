#include "core/shape.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

Shape::Shape(std::initializer_list<int64_t> dims) : dims_(dims.begin(), dims.end()) { validate(); }

Shape::Shape(absl::Span<const int64_t> dims) : dims_(dims.begin(), dims.end()) { validate(); }

void Shape::validate() {
  numel_ = 1;
  for (int i = 0; i < rank(); ++i) {
    TANDEM_CHECK(dims_[i] >= 0, "shape ", to_string(), " has a negative dimension at axis ", i);
  }
  // Check the product of the non-zero dims, so that a shape whose strides
  // overflow is refused even when a zero dim makes it empty.
  int64_t nonzero = 1;
  for (int64_t d : dims_) {
    nonzero = checked_mul(nonzero, std::max<int64_t>(d, 1), "shape element count");
    numel_ *= d;
  }
}

int64_t Shape::dim(int64_t i) const { return dims_[normalize_axis(i)]; }

int Shape::normalize_axis(int64_t axis) const {
  TANDEM_CHECK(axis >= -rank() && axis < rank(), "axis ", axis, " is out of range for shape ",
               to_string(), " of rank ", rank());
  return static_cast<int>(axis < 0 ? axis + rank() : axis);
}

int64_t Shape::stride(int i) const {
  int64_t stride = 1;
  for (int j = normalize_axis(i) + 1; j < rank(); ++j) stride *= dims_[j];
  return stride;
}

std::string Shape::to_string() const {
  std::string text = "[";
  for (int i = 0; i < rank(); ++i) text += str_cat(i ? ", " : "", dims_[i]);
  text += "]";
  return text;
}

}  // namespace tandem
