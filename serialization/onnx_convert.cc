#include "serialization/onnx_convert.h"

#include <cmath>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "kernels/known_ops.h"

namespace tandem::serialization::onnx_convert {

OnnxValue reshape(Node& n, const OnnxValue& x, Ints dims) {
  if (n.meta(x).shape == Shape(dims)) return x;
  return n.op(kernels::reshape_op(), {{"shape", std::move(dims)}}, {x});
}

OnnxValue sliced(Node& n, const OnnxValue& x, int64_t axis, int64_t begin, int64_t end) {
  return n.op(kernels::slice_op(),
              {{"axis", axis}, {"begin", begin}, {"end", end}, {"step", int64_t{1}}}, {x});
}

OnnxValue slice_at(Node& n, const OnnxValue& x, int64_t axis, int64_t at) {
  Ints dims = dims_of(n.meta(x).shape);
  dims.erase(dims.begin() + axis);
  return reshape(n, sliced(n, x, axis, at, at + 1), dims);
}

OnnxValue cast(Node& n, const OnnxValue& x, DType dtype) {
  if (n.meta(x).dtype == dtype) return x;
  return n.op(kernels::cast_op(), {{"dtype", dtype}}, {x});
}

OnnxValue scalar_like(Node& n, const OnnxValue& x, double value) {
  return n.scalar(value, n.meta(x).dtype);
}

int64_t normalize_axis(Node& n, int64_t axis, int64_t rank, std::string_view what) {
  if (rank == 0) n.refuse(str_cat(what, " ", axis, " of a scalar"));
  if (axis < -rank || axis >= rank) {
    n.refuse(str_cat(what, " ", axis, " is out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

Ints all_axes(int64_t rank) {
  Ints axes(static_cast<size_t>(rank));
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

int64_t product(absl::Span<const int64_t> dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p = checked_mul(p, dims[i], "a flattened size");
  return p;
}

Ints dims_of(const Shape& s) { return Ints(s.begin(), s.end()); }

void check_host_count(Node& n, int64_t count, std::string_view what) {
  if (count > kMaxHostElements) {
    n.refuse(str_cat(what, " would hold ", count, " elements at import, over ", kMaxHostElements));
  }
}

int64_t integral(Node& n, double v, std::string_view what) {
  if (!(std::abs(v) < 9.0e18) || v != std::floor(v)) {
    n.refuse(str_cat(what, " ", v, " is not an integer"));
  }
  return int64_t(v);
}

OnnxValue stacked(Node& n, const std::vector<OnnxValue>& values, int64_t axis) {
  if (values.empty()) n.refuse("nothing to stack");
  const Shape shape = n.meta(values[0]).shape;
  if (axis < 0 || axis > shape.rank()) n.refuse(str_cat("cannot stack along axis ", axis));
  std::vector<OnnxValue> parts;
  for (const OnnxValue& v : values) {
    if (n.meta(v).shape != shape) {
      n.refuse(str_cat("cannot stack ", shape.to_string(), " and ", n.meta(v).shape.to_string()));
    }
    Ints dims = dims_of(shape);
    dims.insert(dims.begin() + axis, 1);
    parts.push_back(reshape(n, v, dims));
  }
  return parts.size() == 1 ? parts[0] : n.op(kernels::concat_op(), {{"axis", axis}}, parts);
}

std::optional<OnnxValue> optional_input(Node& n, size_t i) {
  return n.has_input(i) ? std::optional(n.input(i)) : std::nullopt;
}

void check_unrolled_steps(Node& n, int64_t steps, std::string_view what) {
  if (steps < 1) n.refuse("an empty sequence");
  if (steps > kMaxUnrolledSteps) {
    n.refuse(str_cat(what, " over ", steps, " steps: unrolled, at most ", kMaxUnrolledSteps));
  }
}

int64_t known_count(Node& n, size_t i, std::string_view what) {
  const int64_t v = integral(n, n.known_scalar(i, what), what);
  if (v < 0) n.refuse(str_cat(what, " is negative (", v, ")"));
  check_host_count(n, v, what);
  return v;
}

}  // namespace tandem::serialization::onnx_convert
