// Checks on tensors read from files, made before the bytes become a Tensor.
//
//   if (auto problem = shape_problem(dims, dtype)) fail(offset, "tensor 'w': ", *problem);
//   Tensor t = Tensor::empty(Shape(dims), dtype);  // Cannot throw now.
//   ... read the bytes into t ...
//   if (auto i = invalid_bool(bytes)) fail(offset + *i, "bool element ", *i, ...);
//
// Shape and Tensor::empty check shapes too, but their messages cannot name
// the file, the byte offset or the tensor; a loader asks here first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/types/span.h"

#include "core/dtype.h"

namespace tandem::serialization {

// Why `dims` of `dtype` cannot be a tensor — a negative dimension, or an
// element count or byte length that overflows int64 — or nothing when it
// can. The message quotes the shape ("negative dimension -1 in shape
// [-1, 4]").
std::optional<std::string> shape_problem(absl::Span<const int64_t> dims, DType dtype);

// The index of the first byte of a bool tensor's data that is neither 0 nor
// 1, or nothing. Any other byte would be a bool with an undefined value.
std::optional<uint64_t> invalid_bool(absl::Span<const uint8_t> bytes);

}  // namespace tandem::serialization
