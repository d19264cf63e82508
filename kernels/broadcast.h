// NumPy broadcasting: shapes, the strides that read a broadcast input, and
// the reduction that takes a gradient back to an input's shape.
//
//   broadcast_shapes({2, 1, 3}, {4, 1});   // [2, 4, 3]
//   broadcast_shapes({2, 3}, {4});         // Error: "shapes [2, 3] and [4] cannot
//                                          //  broadcast: 3 vs 4 at axis -1"
#pragma once

#include <cstdint>

#include "absl/container/inlined_vector.h"

#include "core/shape.h"
#include "core/tensor.h"

namespace tandem::kernels {

using Strides = absl::InlinedVector<int64_t, 6>;

// The shape both operands broadcast to; throws tandem::Error naming both.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Element strides for reading `in` at each index of `out` (0 along axes
// where `in` is broadcast). `in` must broadcast to `out`.
Strides broadcast_strides(const Shape& in, const Shape& out);

// Sums `grad` (shaped like a broadcast result) down to `shape`, the shape of
// the operand that was broadcast, using the "sum" op. Returns `grad` itself
// when the shapes already match.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace tandem::kernels
