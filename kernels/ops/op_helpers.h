// Helpers for writing op families: calling other ops from a gradient, and
// constants. Internal to kernels/.
#pragma once

#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "kernels/scalar.h"

namespace tandem::kernels {

// Where an op called from inside another op's code reports its errors: the
// call site of the innermost open CallSiteScope (Note [Call sites] in
// core/error.h). backward() opens one with the forward op's node, so an op of
// a gradient formula names the user's line of the forward call; with no
// scope open (a test calling a gradient directly), `fallback`, the line that
// called op().
std::source_location enclosing_call_site(const std::source_location& fallback);

// call1() made inside another op's work (a gradient formula, a composite
// op), which reports the enclosing call's site:
//   return {nested_call1(mul, {g, b}), nested_call1(mul, {g, a})};
// The call site is enclosing_call_site(the caller's line).
inline Tensor nested_call1(std::string_view name, absl::Span<const Tensor> inputs,
                           const Attrs& attrs = {},
                           std::source_location fallback = std::source_location::current()) {
  return call1(name, inputs, attrs, enclosing_call_site(fallback));
}
inline Tensor nested_call1(const OpDef& def, absl::Span<const Tensor> inputs,
                           const Attrs& attrs = {},
                           std::source_location fallback = std::source_location::current()) {
  return call1(def, inputs, attrs, enclosing_call_site(fallback));
}
// The same for ops with several outputs (split, the backward ops).
inline std::vector<Tensor> nested_call(
    std::string_view name, absl::Span<const Tensor> inputs, const Attrs& attrs = {},
    std::source_location fallback = std::source_location::current()) {
  return call(name, inputs, attrs, enclosing_call_site(fallback));
}

// A tensor of zeros made by the "zeros" op on `device` (a gradient known to
// be zero, or a buffer a scatter adds into), seen by autograd and the tracer
// like any op.
Tensor zeros(const Shape& shape, DType dtype, Device device,
             std::source_location fallback = std::source_location::current());

// A 0-d tensor holding `size`, a count computed from shapes (the elements a
// mean averages), made by the "full" op: a trace then records it as a node
// whose value follows the model's free dimensions (trace/symbolic_shapes.h),
// where a scalar made on the host would be frozen at the traced sizes.
Tensor size_scalar(int64_t size, DType dtype, Device device,
                   std::source_location fallback = std::source_location::current());

// Zeros of t's shape, dtype and device (a gradient's starting point).
Tensor zeros_like(const Tensor& t, std::source_location fallback = std::source_location::current());

// "[1, 2, 3]", for messages about int-list attributes.
std::string ints_to_string(const std::vector<int64_t>& ints);

// Schema entries: an attribute the call must give (`type` says its type),
// and one with a default.
AttrSpec required(std::string name, AttrValue type);
AttrSpec optional(std::string name, AttrValue value);

// The single-input op's TensorMeta checks shared by many families.
void check_floating(const char* what, DType dtype);

}  // namespace tandem::kernels
