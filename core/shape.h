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

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

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
  int64_t dim(int i) const;
  // Maps a possibly negative axis to [0, rank()), or throws naming the axis.
  int normalize_axis(int axis) const;

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

// Multiplies two non-negative sizes, throwing tandem::Error naming `what` if
// the product overflows int64_t.
int64_t checked_mul(int64_t a, int64_t b, const char* what);

}  // namespace tandem
