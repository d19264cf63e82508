// The dimensions of a tensor, outermost first.
//
//   tandem::Shape s{2, 3, 4};
//   s.rank();       // 3
//   s.numel();      // 24
//   s.dim(-1);      // 4 (negative indices count from the end)
//   s.to_string();  // "[2, 3, 4]"
//
// A Shape is validated when built: every dimension is >= 0 and the element
// count fits in int64_t. So `numel()` never overflows, and code that holds a
// Shape may multiply its dimensions freely. Rank 0 (`Shape{}`) is a scalar with
// one element.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

#include "core/error.h"

namespace tandem {

class Shape {
 public:
  // Most tensors have rank <= 6; those dims live inline, without allocation.
  using Dims = absl::InlinedVector<int64_t, 6>;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(absl::Span<const int64_t> dims);

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t numel() const { return numel_; }
  absl::Span<const int64_t> dims() const { return dims_; }

  // Unchecked access, 0 <= i < rank().
  int64_t operator[](int i) const { return dims_[i]; }
  // Checked access; -1 is the last dimension.
  int64_t dim(int64_t i) const;
  // Maps a possibly negative axis to [0, rank()), or throws naming the axis
  // and the rank. Takes the int64 of an op's "axis" attribute as it is, so
  // that no axis is narrowed before it is checked (2^32 is out of range, not
  // axis 0).
  int normalize_axis(int64_t axis) const;

  // Elements between consecutive indices of axis i in a contiguous tensor.
  int64_t stride(int i) const;

  std::string to_string() const;

  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  friend bool operator==(const Shape& a, const Shape& b) { return a.dims_ == b.dims_; }

 private:
  void validate();

  Dims dims_;
  int64_t numel_ = 1;
};

// Note [Checked size arithmetic]
// Every size, offset and count computed from input (shapes, op attributes,
// file headers) goes through these: a + b, a - b or a * b exactly, or a
// tandem::Error "<what> overflows int64 (a + b)" when the result does not fit
// in int64_t. `what` names the quantity and where it comes from:
//
//   checked_add(dim, before, "axis ", i, " of ", [&] { return shape.to_string(); },
//               " padded by pads[", 2 * i, "]");
//
// Its parts are anything str_cat takes, or functions returning one (for parts
// that cost something to format, like a shape); they are formatted only on
// failure, so a check costs one overflow test. Inside an op's shape inference
// the error also names the op and the user's line (Note [Call sites] in
// core/error.h).
namespace detail {
template <class Part>
decltype(auto) format_part(const Part& part) {
  if constexpr (std::is_invocable_v<const Part&>) {
    return part();
  } else {
    return (part);
  }
}
}  // namespace detail

template <class... What>
int64_t checked_add(int64_t a, int64_t b, const What&... what) {
  int64_t sum;
  TANDEM_CHECK(!__builtin_add_overflow(a, b, &sum), detail::format_part(what)...,
               " overflows int64 (", a, " + ", b, ")");
  return sum;
}
template <class... What>
int64_t checked_sub(int64_t a, int64_t b, const What&... what) {
  int64_t difference;
  TANDEM_CHECK(!__builtin_sub_overflow(a, b, &difference), detail::format_part(what)...,
               " overflows int64 (", a, " - ", b, ")");
  return difference;
}
template <class... What>
int64_t checked_mul(int64_t a, int64_t b, const What&... what) {
  int64_t product;
  TANDEM_CHECK(!__builtin_mul_overflow(a, b, &product), detail::format_part(what)...,
               " overflows int64 (", a, " * ", b, ")");
  return product;
}

}  // namespace tandem
