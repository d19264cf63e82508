#include "serialization/tensor_check.h"

#include <algorithm>

#include "absl/strings/str_join.h"

#include "core/error.h"

namespace tandem::serialization {
namespace {

std::string shape_text(absl::Span<const int64_t> dims) {
  return str_cat("[", absl::StrJoin(dims, ", "), "]");
}

}  // namespace

std::optional<std::string> shape_problem(absl::Span<const int64_t> dims, DType dtype) {
  for (int64_t d : dims) {
    if (d < 0) return str_cat("negative dimension ", d, " in shape ", shape_text(dims));
  }
  // As Shape: the product of the non-zero dims must fit too, so that strides
  // fit even when a zero dim makes the tensor empty.
  int64_t nonzero = 1;
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(nonzero, std::max<int64_t>(d, 1), &nonzero)) {
      return str_cat("the element count of shape ", shape_text(dims), " overflows int64");
    }
    numel *= d;
  }
  int64_t bytes;
  if (__builtin_mul_overflow(numel, static_cast<int64_t>(dtype_size(dtype)), &bytes)) {
    return str_cat("the byte length of shape ", shape_text(dims), " ", dtype_name(dtype),
                   " overflows int64");
  }
  return std::nullopt;
}

std::optional<uint64_t> invalid_bool(absl::Span<const uint8_t> bytes) {
  const auto bad = std::find_if(bytes.begin(), bytes.end(), [](uint8_t b) { return b > 1; });
  if (bad == bytes.end()) return std::nullopt;
  return bad - bytes.begin();
}

}  // namespace tandem::serialization
