#include "serialization/onnx_ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"
#include "serialization/onnx_file.h"

namespace tandem::serialization::onnx_convert {
namespace {

using kernels::Attrs;
using kernels::op_def;

// Window sizes, strides, dilations and pads are at most this, and the
// input sizes they meet at most kMaxWindowInput: the window arithmetic then
// cannot overflow.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 20;
constexpr int64_t kMaxWindowInput = int64_t{1} << 40;

// The permutation that moves the last of `rank` axes to `axis`.
Ints last_axis_to(int64_t axis, int64_t rank) {
  Ints perm;
  for (int64_t i = 0; i < rank; ++i) perm.push_back(i < axis ? i : i == axis ? rank - 1 : i - 1);
  return perm;
}

// ---------------------------------------------------------------------------------------------
// Elementwise
// ---------------------------------------------------------------------------------------------

template <class E>
void unary(Node& n) {
  n.set_output(0, ew1<E>(n, n.input(0)));
}

// Before opset 7, a binary op broadcast only with broadcast = 1, its second
// operand aligned with the first's axes from `axis` on (the trailing ones by
// default); opset 7 made it NumPy's rule. The old form, as the new one.
OnnxValue legacy_broadcast(Node& n, const OnnxValue& b) {
  if (n.opset() >= 7 || n.attr_int("broadcast", 0) == 0 || !n.attr("axis")) return b;
  const int64_t rank = n.shape(0).rank();
  const Ints bd = dims_of(n.meta(b).shape);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), rank);
  if (axis + int64_t(bd.size()) > rank) n.refuse("the broadcast operand does not fit at axis");
  Ints aligned = bd;
  aligned.resize(size_t(rank - axis), 1);
  return reshape(n, b, aligned);
}

// 16-bit floats in float32: Tandem's arithmetic kernels have none of their
// own, and a 16-bit kernel computes in float32 and rounds back too.
bool is_half(Node& n, const OnnxValue& v) {
  const DType d = n.meta(v).dtype;
  return d == DType::kFloat16 || d == DType::kBFloat16;
}
OnnxValue widened(Node& n, const OnnxValue& v) {
  return is_half(n, v) ? cast(n, v, DType::kFloat32) : v;
}

template <class E>
void binary(Node& n) {
  const OnnxValue a = n.input(0);
  const OnnxValue y = ew2<E>(n, widened(n, a), widened(n, legacy_broadcast(n, n.input(1))));
  n.set_output(0, cast(n, y, n.meta(a).dtype));
}

void comparison(Node& n, const kernels::OpDef& op) {
  n.set_output(0, n.op(op, {}, {n.input(0), legacy_broadcast(n, n.input(1))}));
}

void convert_pow(Node& n) {
  // The exponent may have another type; the result has the base's.
  const OnnxValue base = n.input(0);
  n.set_output(0, ew2<ew::Pow>(n, base, cast(n, legacy_broadcast(n, n.input(1)), n.dtype(0))));
}

// fmod = 1: the remainder of the quotient truncated toward zero (C's fmod,
// the dividend's sign). fmod = 0 (integers only): Python's, the divisor's
// sign. Tandem's integer div truncates exactly, so both are exact.
void convert_mod(Node& n) {
  const OnnxValue a = widened(n, n.input(0)), b = widened(n, n.input(1));
  const bool floating = is_floating_point(n.dtype(0));
  const bool c_fmod = n.attr_int("fmod", 0) == 1;
  if (floating && !c_fmod) n.refuse("floating-point Mod needs fmod = 1");
  OnnxValue q = ew2<ew::Div>(n, a, b);
  if (floating) q = ew1<ew::Trunc>(n, q);
  OnnxValue r = ew2<ew::Sub>(n, a, ew2<ew::Mul>(n, q, b));
  if (!c_fmod) {
    // A nonzero remainder whose sign is not the divisor's moves by b.
    const OnnxValue zero = scalar_like(n, r, 0);
    const OnnxValue signs_differ = n.op(kernels::ne_op(), {},
                                        {n.op(kernels::lt_op(), {}, {r, zero}),
                                         n.op(kernels::lt_op(), {}, {b, scalar_like(n, b, 0)})});
    const OnnxValue adjust =
        n.op(kernels::where_op(), {},
             {n.op(kernels::ne_op(), {}, {r, zero}), signs_differ, n.scalar(0, DType::kBool)});
    r = n.op(kernels::where_op(), {}, {adjust, ew2<ew::Add>(n, r, b), r});
  }
  n.set_output(0, cast(n, r, n.dtype(0)));
}

// x << y and x >> y of uint8 (Tandem's only unsigned integers) in int64:
// x * 2^y modulo 256, or x / 2^y; a shift by 8 or more leaves 0.
void convert_bit_shift(Node& n) {
  if (n.dtype(0) != DType::kUInt8 || n.dtype(1) != DType::kUInt8)
    n.refuse("operands must be uint8");
  const std::string direction = n.attr_string("direction", "");
  if (direction != "LEFT" && direction != "RIGHT") n.refuse(str_cat("direction '", direction, "'"));
  const OnnxValue x = cast(n, n.input(0), DType::kInt64);
  const OnnxValue y =
      ew2<ew::Minimum>(n, cast(n, n.input(1), DType::kInt64), n.scalar(8, DType::kInt64));
  const OnnxValue scale = ew2<ew::Pow>(n, n.scalar(2, DType::kInt64), y);
  OnnxValue r = ew2<ew::Div>(n, x, scale);
  if (direction == "LEFT") {
    const OnnxValue wide = ew2<ew::Mul>(n, x, scale);
    const OnnxValue byte = n.scalar(256, DType::kInt64);
    r = ew2<ew::Sub>(n, wide, ew2<ew::Mul>(n, ew2<ew::Div>(n, wide, byte), byte));
  }
  n.set_output(0, cast(n, r, DType::kUInt8));
}

// And, Or, Xor of bools: from the count of true operands.
void convert_logical(Node& n, int kind) {
  if (n.dtype(0) != DType::kBool || n.dtype(1) != DType::kBool) n.refuse("operands must be bool");
  const OnnxValue a = n.input(0), b = legacy_broadcast(n, n.input(1));
  if (kind == 2) return n.set_output(0, n.op(kernels::ne_op(), {}, {a, b}));
  const OnnxValue count = ew2<ew::Add>(n, cast(n, a, DType::kInt32), cast(n, b, DType::kInt32));
  n.set_output(0, kind == 0 ? n.op(kernels::eq_op(), {}, {count, n.scalar(2, DType::kInt32)})
                            : n.op(kernels::ne_op(), {}, {count, n.scalar(0, DType::kInt32)}));
}

// Max, Min, Sum, Mean of any number of operands.
template <class E>
void variadic(Node& n, bool mean = false) {
  OnnxValue acc = widened(n, n.input(0));
  for (size_t i = 1; i < n.num_inputs(); ++i) acc = ew2<E>(n, acc, widened(n, n.input(i)));
  if (mean) acc = ew2<ew::Div>(n, acc, scalar_like(n, acc, double(n.num_inputs())));
  n.set_output(0, cast(n, acc, n.dtype(0)));
}

void convert_elu(Node& n) {
  n.set_output(0, ew1<ew::Elu>(n, n.input(0), {{"alpha", n.attr_float("alpha", 1.0)}}));
}
void convert_celu(Node& n) {
  n.set_output(0, ew1<ew::Celu>(n, n.input(0), {{"alpha", n.attr_float("alpha", 1.0)}}));
}
void convert_leaky_relu(Node& n) {
  n.set_output(0, ew1<ew::LeakyRelu>(n, n.input(0), {{"alpha", n.attr_float("alpha", 0.01)}}));
}
void convert_selu(Node& n) {
  const double alpha = n.attr_float("alpha", 1.67326319217681884765625);
  const double gamma = n.attr_float("gamma", 1.05070102214813232421875);
  const OnnxValue x = n.input(0);
  n.set_output(0,
               ew2<ew::Mul>(n, ew1<ew::Elu>(n, x, {{"alpha", alpha}}), scalar_like(n, x, gamma)));
}
void convert_hard_sigmoid(Node& n) {
  const OnnxValue x = n.input(0);
  const OnnxValue y =
      ew2<ew::Add>(n, ew2<ew::Mul>(n, x, scalar_like(n, x, n.attr_float("alpha", 0.2))),
                   scalar_like(n, x, n.attr_float("beta", 0.5)));
  n.set_output(0, ew1<ew::Clip>(n, y, {{"min", 0.0}, {"max", 1.0}}));
}
void convert_thresholded_relu(Node& n) {
  const OnnxValue x = n.input(0);
  const OnnxValue keep =
      n.op(kernels::gt_op(), {}, {x, scalar_like(n, x, n.attr_float("alpha", 1.0))});
  n.set_output(0, n.op(kernels::where_op(), {}, {keep, x, scalar_like(n, x, 0)}));
}
void convert_shrink(Node& n) {
  const OnnxValue x = n.input(0);
  const double bias = n.attr_float("bias", 0), lambd = n.attr_float("lambd", 0.5);
  const OnnxValue low = n.op(kernels::lt_op(), {}, {x, scalar_like(n, x, -lambd)});
  const OnnxValue high = n.op(kernels::gt_op(), {}, {x, scalar_like(n, x, lambd)});
  const OnnxValue up = ew2<ew::Add>(n, x, scalar_like(n, x, bias));
  const OnnxValue down = ew2<ew::Sub>(n, x, scalar_like(n, x, bias));
  n.set_output(0,
               n.op(kernels::where_op(), {},
                    {low, up, n.op(kernels::where_op(), {}, {high, down, scalar_like(n, x, 0)})}));
}
void convert_prelu(Node& n) {
  const OnnxValue x = n.input(0);
  OnnxValue slope = n.input(1);
  // Before opset 7 a slope of C values is per channel (axis 1).
  const Shape xs = n.shape(0), ss = n.meta(slope).shape;
  if (n.opset() < 7 && ss.rank() == 1 && xs.rank() >= 2 && ss[0] == xs[1] && ss[0] != 1) {
    Ints d(size_t(xs.rank() - 1), 1);
    d[0] = ss[0];
    slope = reshape(n, slope, d);
  }
  const OnnxValue negative = n.op(kernels::lt_op(), {}, {x, scalar_like(n, x, 0)});
  n.set_output(0, n.op(kernels::where_op(), {}, {negative, ew2<ew::Mul>(n, x, slope), x}));
}
void convert_clip(Node& n) {
  if (!is_floating_point(n.dtype(0))) n.refuse("Clip of integers is not supported");
  const OnnxValue x = n.input(0);
  if (n.opset() < 11) {
    const double inf = std::numeric_limits<double>::infinity();
    return n.set_output(
        0, ew1<ew::Clip>(n, x,
                         {{"min", n.attr_float("min", -inf)}, {"max", n.attr_float("max", inf)}}));
  }
  // Bounds as inputs: known ones become attributes, others tensor ops.
  Attrs bounds;
  OnnxValue y = x;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!n.has_input(i)) continue;
    const OnnxValue bound = n.input(i);
    if (bound.is_known()) {
      bounds.set(i == 1 ? "min" : "max", n.known_scalar(i, i == 1 ? "min" : "max"));
    } else {
      y = i == 1 ? ew2<ew::Maximum>(n, y, bound) : ew2<ew::Minimum>(n, y, bound);
    }
  }
  if (!bounds.items().empty()) y = ew1<ew::Clip>(n, y, bounds);
  n.set_output(0, y);
}

void convert_isinf(Node& n) {
  const OnnxValue x = n.input(0);
  const bool positive = n.attr_int("detect_positive", 1) != 0;
  const bool negative = n.attr_int("detect_negative", 1) != 0;
  if (positive && negative) return n.set_output(0, ew1<ew::Isinf>(n, x));
  if (!positive && !negative) {
    return n.set_output(0, n.op(kernels::ne_op(), {}, {x, x}) /* false, except NaN */);
  }
  const double inf = std::numeric_limits<double>::infinity();
  n.set_output(0, n.op(kernels::eq_op(), {}, {x, scalar_like(n, x, positive ? inf : -inf)}));
}

// ---------------------------------------------------------------------------------------------
// Values and shapes
// ---------------------------------------------------------------------------------------------

void convert_identity(Node& n) { n.set_output(0, n.input(0)); }

void convert_constant(Node& n) {
  if (n.attr("value")) return n.set_output(0, n.constant(n.attr_tensor("value")));
  if (n.attr("value_float")) {
    return n.set_output(0, n.scalar(n.attr_float("value_float", 0), DType::kFloat32));
  }
  if (n.attr("value_int")) {
    return n.set_output(
        0, n.constant(Tensor::from_vector<int64_t>({n.attr_int("value_int", 0)}, Shape{})));
  }
  if (auto v = n.attr_floats("value_floats")) {
    return n.set_output(0, n.constant(Tensor::from_vector<float>(*v, Shape{int64_t(v->size())})));
  }
  if (auto v = n.attr_ints("value_ints")) {
    return n.set_output(0, n.constant(Tensor::from_vector<int64_t>(*v, Shape{int64_t(v->size())})));
  }
  n.refuse("only tensor, float and int values are supported (not sparse or string ones)");
}

void convert_shape(Node& n) {
  const Ints dims = dims_of(n.shape(0));
  const int64_t rank = static_cast<int64_t>(dims.size());
  auto clamp = [&](int64_t a) { return std::clamp<int64_t>(a < 0 ? a + rank : a, 0, rank); };
  const int64_t begin = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  Ints out(dims.begin() + begin, dims.begin() + std::max(begin, end));
  n.set_output(0, n.constant(Tensor::from_vector<int64_t>(out, Shape{int64_t(out.size())}), true));
}

void convert_size(Node& n) {
  n.set_output(0, n.constant(Tensor::from_vector<int64_t>({n.shape(0).numel()}, Shape{}), true));
}

void convert_cast(Node& n) {
  if (n.opset() < 6) n.refuse("Cast's 'to' as a type name (before opset 6) is not supported");
  const int32_t to = static_cast<int32_t>(n.attr_int("to", 0));
  const std::optional<DType> dtype = dtype_from_onnx(to);
  if (!dtype) n.refuse(str_cat("Tandem has no tensors of type ", onnx_type_name(to)));
  n.set_output(0, cast(n, n.input(0), *dtype));
}

void convert_cast_like(Node& n) { n.set_output(0, cast(n, n.input(0), n.dtype(1))); }

void convert_reshape(Node& n) {
  const Shape in = n.shape(0);
  Ints dims = n.opset() < 5 ? n.attr_ints("shape").value_or(Ints{}) : n.known_ints(1, "shape");
  const bool allow_zero = n.attr_int("allowzero", 0) != 0;
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 0 && !allow_zero) {
      if (int64_t(i) >= in.rank()) n.refuse("shape copies a dimension the input lacks");
      dims[i] = in[int(i)];
    }
    if (dims[i] == -1) {
      if (infer >= 0) n.refuse("shape has two -1s");
      infer = int(i);
      continue;
    }
    if (dims[i] < 0) n.refuse(str_cat("shape has a negative size ", dims[i]));
    known = checked_mul(known, dims[i], "Reshape's size");
  }
  if (infer >= 0) {
    if (known == 0 || in.numel() % known != 0) n.refuse("the -1 of shape cannot be inferred");
    dims[size_t(infer)] = in.numel() / known;
  }
  n.set_output(0, reshape(n, n.input(0), dims));
}

void convert_flatten(Node& n) {
  const Ints dims = dims_of(n.shape(0));
  const int64_t rank = int64_t(dims.size());
  const int64_t axis = n.attr_int("axis", 1);
  if (axis < -rank || axis > rank) n.refuse(str_cat("axis ", axis, " is out of range"));
  const size_t a = size_t(axis < 0 ? axis + rank : axis);
  n.set_output(0, reshape(n, n.input(0), {product(dims, 0, a), product(dims, a, dims.size())}));
}

// Squeeze's and Unsqueeze's axes: an attribute before opset 13, an input after.
std::optional<Ints> axes_of(Node& n, size_t input, int since_as_input) {
  if (n.opset() < since_as_input) return n.attr_ints("axes");
  if (!n.has_input(input)) return std::nullopt;
  return n.known_ints(input, "axes");
}

void convert_squeeze(Node& n) {
  const Ints dims = dims_of(n.shape(0));
  const int64_t rank = int64_t(dims.size());
  std::vector<bool> drop(dims.size(), false);
  if (std::optional<Ints> axes = axes_of(n, 1, 13)) {
    for (int64_t a : *axes) {
      const int64_t axis = normalize_axis(n, a, rank);
      if (dims[size_t(axis)] != 1) n.refuse(str_cat("axis ", a, " has size ", dims[size_t(axis)]));
      drop[size_t(axis)] = true;
    }
  } else {
    for (size_t i = 0; i < dims.size(); ++i) drop[i] = dims[i] == 1;
  }
  Ints out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!drop[i]) out.push_back(dims[i]);
  }
  n.set_output(0, reshape(n, n.input(0), out));
}

void convert_unsqueeze(Node& n) {
  const Ints dims = dims_of(n.shape(0));
  const std::optional<Ints> axes = axes_of(n, 1, 13);
  if (!axes) n.refuse("axes are required");
  const int64_t rank = int64_t(dims.size() + axes->size());
  std::vector<bool> inserted(size_t(rank), false);
  for (int64_t a : *axes) {
    const int64_t axis = normalize_axis(n, a, rank);
    if (inserted[size_t(axis)]) n.refuse(str_cat("axis ", a, " is given twice"));
    inserted[size_t(axis)] = true;
  }
  Ints out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) out.push_back(inserted[size_t(i)] ? 1 : dims[next++]);
  n.set_output(0, reshape(n, n.input(0), out));
}

void convert_transpose(Node& n) {
  const int64_t rank = n.shape(0).rank();
  Ints perm = n.attr_ints("perm").value_or(Ints{});
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  n.set_output(0, n.op(kernels::transpose_op(), {{"perm", perm}}, {n.input(0)}));
}

void convert_concat(Node& n) {
  std::vector<OnnxValue> inputs;
  for (size_t i = 0; i < n.num_inputs(); ++i) inputs.push_back(n.input(i));
  const int64_t axis = n.attr_int("axis", n.opset() < 4 ? 1 : 0);
  n.set_output(0, n.op(kernels::concat_op(), {{"axis", axis}}, inputs));
}

void convert_split(Node& n) {
  const Shape in = n.shape(0);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), in.rank());
  if (n.opset() < 2 && n.has_input(1)) n.refuse("split sizes as an input (opset 1)");
  std::optional<Ints> sizes =
      n.opset() < 13
          ? n.attr_ints("split")
          : (n.has_input(1) ? std::optional<Ints>(n.known_ints(1, "split")) : std::nullopt);
  if (!sizes || sizes->empty()) {
    const int64_t parts = int64_t(n.num_outputs()), dim = in[int(axis)];
    if (dim % parts != 0)
      n.refuse(str_cat("size ", dim, " does not split into ", parts, " equal parts"));
    sizes = Ints(size_t(parts), dim / parts);
  }
  const std::vector<OnnxValue> pieces =
      n.ops(kernels::split_op(), {{"axis", axis}, {"sizes", *sizes}}, {n.input(0)});
  for (size_t i = 0; i < pieces.size(); ++i) n.set_output(i, pieces[i]);
}

void convert_slice(Node& n) {
  const Shape in = n.shape(0);
  Ints starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.attr_ints("starts").value_or(Ints{});
    ends = n.attr_ints("ends").value_or(Ints{});
    axes = n.attr_ints("axes").value_or(Ints{});
  } else {
    starts = n.known_ints(1, "starts");
    ends = n.known_ints(2, "ends");
    if (n.has_input(3)) axes = n.known_ints(3, "axes");
    if (n.has_input(4)) steps = n.known_ints(4, "steps");
  }
  if (axes.empty()) axes = all_axes(int64_t(starts.size()));
  if (steps.empty()) steps = Ints(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    n.refuse("starts, ends, axes and steps differ in length");
  }
  OnnxValue x = n.input(0);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = normalize_axis(n, axes[i], in.rank());
    const int64_t dim = in[int(axis)], step = steps[i];
    if (step == 0) n.refuse("a step is 0");
    // ONNX's bounds, clamped as NumPy's.
    auto bound = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v = v < -dim ? -1 : v + dim;
      return std::clamp<int64_t>(v, lo, hi);
    };
    if (step > 0) {
      const int64_t begin = bound(starts[i], 0, dim), end = bound(ends[i], 0, dim);
      if (begin == 0 && end == dim && step == 1) continue;
      x = n.op(kernels::slice_op(),
               {{"axis", axis}, {"begin", begin}, {"end", std::max(begin, end)}, {"step", step}},
               {x});
      continue;
    }
    // A negative step: the positions, taken.
    const int64_t begin = bound(starts[i], 0, dim - 1);
    const int64_t end = ends[i] < -dim ? -1 : bound(ends[i], -1, dim - 1);
    check_host_count(n, (begin - end) / -step + 1, "a reversed Slice's positions");
    Ints positions;
    for (int64_t p = begin; p > end; p += step) positions.push_back(p);
    x = n.op(
        kernels::take_op(), {{"axis", axis}},
        {x, n.constant(Tensor::from_vector<int64_t>(positions, Shape{int64_t(positions.size())}))});
  }
  n.set_output(0, x);
}

// Indices as int64, negative ones counted from the end of `dim`.
OnnxValue wrapped_indices(Node& n, const OnnxValue& indices, int64_t dim) {
  const OnnxValue i = cast(n, indices, DType::kInt64);
  const OnnxValue negative = n.op(kernels::lt_op(), {}, {i, n.scalar(0, DType::kInt64)});
  return n.op(kernels::where_op(), {},
              {negative, ew2<ew::Add>(n, i, n.scalar(double(dim), DType::kInt64)), i});
}

void convert_gather(Node& n) {
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), n.shape(0).rank());
  n.set_output(0, n.op(kernels::take_op(), {{"axis", axis}},
                       {n.input(0), cast(n, n.input(1), DType::kInt64)}));
}

void convert_gather_elements(Node& n) {
  const Shape in = n.shape(0);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), in.rank());
  n.set_output(0, n.op(kernels::gather_op(), {{"axis", axis}},
                       {n.input(0), wrapped_indices(n, n.input(1), in[int(axis)])}));
}

void convert_gather_nd(Node& n) {
  n.set_output(0, n.op(kernels::gather_nd_op(), {{"batch_dims", n.attr_int("batch_dims", 0)}},
                       {n.input(0), cast(n, n.input(1), DType::kInt64)}));
}

// ScatterND: add with scatter_nd_add; overwrite as where(written, the
// updates scattered onto zeros, x) (ONNX leaves duplicate indices undefined).
// `base` with the slices `indices` name replaced by `updates` (indices
// distinct): where a scatter-add of ones marks them written.
OnnxValue scattered(Node& n, const OnnxValue& base, const OnnxValue& indices,
                    const OnnxValue& updates) {
  const Ints xs = dims_of(n.meta(base).shape), us = dims_of(n.meta(updates).shape);
  const DType dtype = n.meta(base).dtype;
  const OnnxValue zeros =
      n.op(kernels::full_op(), {{"shape", xs}, {"dtype", dtype}, {"value", 0.0}}, {});
  const OnnxValue ones =
      n.op(kernels::full_op(), {{"shape", us}, {"dtype", dtype}, {"value", 1.0}}, {});
  const OnnxValue written = n.op(
      kernels::gt_op(), {},
      {n.op(kernels::scatter_nd_add_op(), {}, {zeros, indices, ones}), scalar_like(n, base, 0)});
  return n.op(kernels::where_op(), {},
              {written, n.op(kernels::scatter_nd_add_op(), {}, {zeros, indices, updates}), base});
}

// reduction = "mul" multiplies each named slice by its updates, by all of
// them where indices repeat: the indices must be known at import, and each
// round of distinct ones scales x once.
OnnxValue multiplied(Node& n, const OnnxValue& x, const OnnxValue& updates) {
  const Ints flat = n.known_ints(1, "indices (with reduction 'mul')");
  const Shape is = n.shape(1);
  if (is.rank() < 1) n.refuse("indices must have a last axis");
  const int64_t depth = is[is.rank() - 1], count = product(dims_of(is), 0, size_t(is.rank() - 1));
  const Ints us = dims_of(n.meta(updates).shape), xs = dims_of(n.meta(x).shape);
  // updates: indices' leading axes, then the slices the tuples name.
  Ints want(is.begin(), is.end() - 1);
  if (depth > int64_t(xs.size())) n.refuse("the index tuples are longer than data's rank");
  want.insert(want.end(), xs.begin() + depth, xs.end());
  if (us != want) n.refuse(str_cat("updates must be ", Shape(want).to_string()));
  const Ints slice(us.begin() + (is.rank() - 1), us.end());
  Ints rows_shape = {count};
  rows_shape.insert(rows_shape.end(), slice.begin(), slice.end());
  const OnnxValue rows = reshape(n, updates, rows_shape);
  // Round r holds the r-th occurrence of each index tuple.
  std::vector<std::vector<int64_t>> rounds;
  std::map<std::vector<int64_t>, size_t> seen;
  for (int64_t k = 0; k < count; ++k) {
    const std::vector<int64_t> tuple(flat.begin() + k * depth, flat.begin() + (k + 1) * depth);
    const size_t r = seen[tuple]++;
    if (r == rounds.size()) rounds.emplace_back();
    rounds[r].push_back(k);
  }
  const OnnxValue ones =
      n.op(kernels::full_op(),
           {{"shape", dims_of(n.meta(x).shape)}, {"dtype", n.meta(x).dtype}, {"value", 1.0}}, {});
  OnnxValue y = x;
  for (const std::vector<int64_t>& members : rounds) {
    Ints tuples;
    for (int64_t k : members)
      tuples.insert(tuples.end(), flat.begin() + k * depth, flat.begin() + (k + 1) * depth);
    const int64_t size = int64_t(members.size());
    const OnnxValue picked =
        n.op(kernels::take_op(), {{"axis", int64_t{0}}},
             {rows, n.constant(Tensor::from_vector<int64_t>(members, Shape{size}))});
    const OnnxValue index = n.constant(Tensor::from_vector<int64_t>(tuples, Shape{size, depth}));
    y = ew2<ew::Mul>(n, y, scattered(n, ones, index, picked));
  }
  return y;
}

void convert_scatter_nd(Node& n) {
  const std::string reduction = n.attr_string("reduction", "none");
  const OnnxValue x = n.input(0), updates = n.input(2);
  if (reduction == "mul") return n.set_output(0, multiplied(n, x, updates));
  const OnnxValue indices = cast(n, n.input(1), DType::kInt64);
  if (reduction == "add") {
    return n.set_output(0, n.op(kernels::scatter_nd_add_op(), {}, {x, indices, updates}));
  }
  if (reduction != "none") n.refuse(str_cat("reduction '", reduction, "'"));
  n.set_output(0, scattered(n, x, indices, updates));
}

void convert_scatter_elements(Node& n) {
  const Shape in = n.shape(0);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), in.rank());
  const std::string reduction = n.attr_string("reduction", "none");
  if (reduction != "none" && reduction != "add") n.refuse(str_cat("reduction '", reduction, "'"));
  const kernels::OpDef& op = reduction == "add" ? kernels::scatter_add_op() : kernels::scatter_op();
  n.set_output(0, n.op(op, {{"axis", axis}},
                       {n.input(0), wrapped_indices(n, n.input(1), in[int(axis)]), n.input(2)}));
}

// ONNX's bidirectional broadcast of two shapes.
Ints broadcast_dims(Node& n, Ints a, Ints b) {
  if (a.size() < b.size()) std::swap(a, b);
  const size_t offset = a.size() - b.size();
  for (size_t i = 0; i < b.size(); ++i) {
    int64_t& d = a[offset + i];
    if (b[i] == d || b[i] == 1) continue;
    if (d != 1) n.refuse(str_cat("shapes do not broadcast (", d, " and ", b[i], ")"));
    d = b[i];
  }
  return a;
}

void convert_expand(Node& n) {
  const Ints out = broadcast_dims(n, dims_of(n.shape(0)), n.known_ints(1, "shape"));
  const OnnxValue x = n.input(0);
  if (Shape(out) == n.shape(0)) return n.set_output(0, x);
  n.set_output(0, n.op(kernels::expand_op(), {{"shape", out}}, {x}));
}

void convert_tile(Node& n) {
  if (n.opset() < 6) n.refuse("Tile with tiles and axis inputs (before opset 6) is not supported");
  const Ints dims = dims_of(n.shape(0));
  const Ints repeats = n.known_ints(1, "repeats");
  if (repeats.size() != dims.size()) n.refuse("repeats must have one value per axis");
  Ints spread, expanded, out;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (repeats[i] < 0) n.refuse("a repeat count is negative");
    spread.insert(spread.end(), {1, dims[i]});
    expanded.insert(expanded.end(), {repeats[i], dims[i]});
    out.push_back(checked_mul(repeats[i], dims[i], "Tile's size"));
  }
  OnnxValue x = reshape(n, n.input(0), spread);
  x = n.op(kernels::expand_op(), {{"shape", expanded}}, {x});
  n.set_output(0, reshape(n, x, out));
}

void convert_constant_of_shape(Node& n) {
  const Ints dims = n.known_ints(0, "shape");
  double value = 0;
  DType dtype = DType::kFloat32;
  if (n.attr("value")) {
    const Tensor v = n.attr_tensor("value");
    if (v.numel() != 1) n.refuse("value must hold one element");
    dtype = v.dtype();
    value =
        kernels::call1(kernels::cast_op(), {v}, {{"dtype", DType::kFloat64}}, {}).item<double>();
  }
  for (int64_t d : dims) {
    if (d < 0) n.refuse("shape has a negative size");
  }
  const OnnxValue shape = n.input(0);
  OnnxValue y = n.op(kernels::full_op(), {{"shape", dims}, {"dtype", dtype}, {"value", value}}, {});
  y.from_sizes = shape.from_sizes;
  n.set_output(0, y);
}

void convert_range(Node& n) {
  const DType dtype = n.dtype(0);
  const double start = n.known_scalar(0, "start"), limit = n.known_scalar(1, "limit"),
               delta = n.known_scalar(2, "delta");
  if (delta == 0) n.refuse("delta is 0");
  OnnxValue y = n.op(kernels::arange_op(),
                     {{"start", start}, {"stop", limit}, {"step", delta}, {"dtype", dtype}}, {});
  y.from_sizes = n.input(0).from_sizes || n.input(1).from_sizes || n.input(2).from_sizes;
  n.set_output(0, y);
}

void convert_where(Node& n) {
  n.set_output(0, n.op(kernels::where_op(), {}, {n.input(0), n.input(1), n.input(2)}));
}

// A bool tensor computed at import from the positions of a [rows, cols]
// matrix (EyeLike's).
template <class Keep>
Tensor position_mask(Node& n, int64_t rows, int64_t cols, Keep keep) {
  check_host_count(n, checked_mul(rows, cols, "a mask's size"), "a mask");
  std::vector<bool> mask;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) mask.push_back(keep(r, c));
  }
  return Tensor::from_vector(mask, Shape{rows, cols});
}

void convert_trilu(Node& n) {
  const Shape in = n.shape(0);
  if (in.rank() < 2) n.refuse("the input must have rank >= 2");
  const int64_t rows = in[in.rank() - 2], cols = in[in.rank() - 1];
  const bool upper = n.attr_int("upper", 1) != 0;
  // Keep (row, col) where col - row >= k (upper) or <= k: k may be computed as
  // the model runs, so the comparison is an op.
  check_host_count(n, checked_mul(rows, cols, "Trilu's mask"), "Trilu's mask");
  std::vector<int64_t> offsets;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) offsets.push_back(c - r);
  }
  const OnnxValue offset =
      n.constant(Tensor::from_vector<int64_t>(offsets, Shape{rows, cols}), true);
  const OnnxValue k = n.has_input(1) ? reshape(n, cast(n, n.input(1), DType::kInt64), {})
                                     : n.scalar(0, DType::kInt64);
  const OnnxValue keep = n.op(upper ? kernels::ge_op() : kernels::le_op(), {}, {offset, k});
  const OnnxValue x = n.input(0);
  n.set_output(0, n.op(kernels::where_op(), {}, {keep, x, scalar_like(n, x, 0)}));
}

void convert_eye_like(Node& n) {
  const Shape in = n.shape(0);
  if (in.rank() != 2) n.refuse("the input must be a matrix");
  const int64_t k = n.attr_int("k", 0);
  DType dtype = n.dtype(0);
  if (n.attr("dtype")) {
    const int32_t type = int32_t(n.attr_int("dtype", 0));
    if (!dtype_from_onnx(type))
      n.refuse(str_cat("Tandem has no tensors of type ", onnx_type_name(type)));
    dtype = *dtype_from_onnx(type);
  }
  const Tensor mask =
      position_mask(n, in[0], in[1], [&](int64_t r, int64_t c) { return c - r == k; });
  n.set_output(0, cast(n, n.constant(mask, true), dtype));
}

void convert_one_hot(Node& n) {
  const double depth_value = n.known_scalar(1, "depth");
  const int64_t depth = integral(n, depth_value, "depth");
  if (depth < 1) n.refuse("depth must be positive");
  const Tensor values = n.known(2, "values");
  if (values.numel() != 2) n.refuse("values must be [off, on]");
  const OnnxValue indices = wrapped_indices(n, cast(n, n.input(0), DType::kInt64), depth);
  const int64_t rank = n.shape(0).rank() + 1;
  const int64_t axis = normalize_axis(n, n.attr_int("axis", -1), rank);
  OnnxValue hot =
      n.op(kernels::one_hot_op(), {{"num_classes", depth}, {"dtype", DType::kBool}}, {indices});
  if (axis != rank - 1) {
    hot = n.op(kernels::transpose_op(), {{"perm", last_axis_to(axis, rank)}}, {hot});
  }
  const OnnxValue v = n.constant(values);
  const OnnxValue off = n.op(kernels::take_op(), {{"axis", int64_t{0}}},
                             {v, n.constant(Tensor::from_vector<int64_t>({0}, Shape{}))});
  const OnnxValue on = n.op(kernels::take_op(), {{"axis", int64_t{0}}},
                            {v, n.constant(Tensor::from_vector<int64_t>({1}, Shape{}))});
  n.set_output(0, n.op(kernels::where_op(), {}, {hot, on, off}));
}

// DepthToSpace and SpaceToDepth: one reshape, one transpose, one reshape.
void convert_depth_to_space(Node& n) {
  const Shape in = n.shape(0);
  if (in.rank() != 4) n.refuse("the input must be [N, C, H, W]");
  const int64_t b = n.attr_int("blocksize", 0), N = in[0], C = in[1], H = in[2], W = in[3];
  if (b < 1 || C % (b * b) != 0) n.refuse("blocksize must divide the channels' square root");
  const bool crd = n.attr_string("mode", "DCR") == "CRD";
  const int64_t c = C / (b * b);
  OnnxValue x =
      crd ? reshape(n, n.input(0), {N, c, b, b, H, W}) : reshape(n, n.input(0), {N, b, b, c, H, W});
  const Ints perm = crd ? Ints{0, 1, 4, 2, 5, 3} : Ints{0, 3, 4, 1, 5, 2};
  x = n.op(kernels::transpose_op(), {{"perm", perm}}, {x});
  n.set_output(0, reshape(n, x,
                          {N, c, checked_mul(H, b, "DepthToSpace's height"),
                           checked_mul(W, b, "DepthToSpace's width")}));
}

void convert_space_to_depth(Node& n) {
  const Shape in = n.shape(0);
  if (in.rank() != 4) n.refuse("the input must be [N, C, H, W]");
  const int64_t b = n.attr_int("blocksize", 0), N = in[0], C = in[1], H = in[2], W = in[3];
  if (b < 1 || H % b != 0 || W % b != 0) n.refuse("blocksize must divide height and width");
  OnnxValue x = reshape(n, n.input(0), {N, C, H / b, b, W / b, b});
  x = n.op(kernels::transpose_op(), {{"perm", Ints{0, 3, 5, 1, 2, 4}}}, {x});
  n.set_output(0, reshape(n, x, {N, C * b * b, H / b, W / b}));
}

void convert_pad(Node& n) {
  const Shape in = n.shape(0);
  const size_t rank = size_t(in.rank());
  Ints pads;
  double value = 0;
  if (n.opset() < 11) {
    pads = n.attr_ints(n.opset() < 2 ? "paddings" : "pads").value_or(Ints{});
    value = n.attr_float("value", 0);
  } else {
    pads = n.known_ints(1, "pads");
    if (n.has_input(2)) value = n.known_scalar(2, "constant_value");
    if (n.has_input(3)) n.refuse("the axes input is not supported");
  }
  if (pads.size() != 2 * rank)
    n.refuse(str_cat("pads has ", pads.size(), " values for rank ", rank));
  const std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    n.refuse(str_cat("mode '", mode, "'"));
  Ints interleaved;
  for (size_t a = 0; a < rank; ++a) {
    if (pads[a] < 0 || pads[a + rank] < 0) n.refuse("negative pads (cropping) are not supported");
    interleaved.insert(interleaved.end(), {pads[a], pads[a + rank]});
  }
  n.set_output(0, n.op(kernels::pad_op(),
                       {{"pads", interleaved},
                        {"value", value},
                        {"mode", mode == "edge" ? std::string("replicate") : mode}},
                       {n.input(0)}));
}

// Identity, except in training mode (opset 12 on) with a nonzero ratio,
// which draws a random mask: refused, as imported graphs are for inference.
void convert_dropout(Node& n) {
  if (n.opset() >= 12 && n.has_input(2) && n.known_scalar(2, "training_mode") != 0) {
    const double ratio = n.has_input(1) ? n.known_scalar(1, "ratio") : 0.5;
    if (ratio != 0) {
      n.refuse(str_cat("training mode with ratio ", ratio,
                       " draws a random mask; imported graphs are for inference"));
    }
  }
  const OnnxValue x = n.input(0);
  n.set_output(0, x);
  if (n.wants_output(1)) {
    n.set_output(
        1, n.op(kernels::full_op(),
                {{"shape", dims_of(n.shape(0))}, {"dtype", DType::kBool}, {"value", 1.0}}, {}));
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------------------------

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

void convert_reduce(Node& n, Reduce kind) {
  const Shape in = n.shape(0);
  const bool keep = n.attr_int("keepdims", 1) != 0;
  std::optional<Ints> axes;
  if (kind == Reduce::kSum && n.opset() >= 13) {
    if (n.has_input(1)) axes = n.known_ints(1, "axes");
  } else {
    axes = n.attr_ints("axes");
  }
  if (!axes || axes->empty()) {
    if (n.attr_int("noop_with_empty_axes", 0) != 0) return n.set_output(0, n.input(0));
    axes = all_axes(in.rank());
  }
  for (int64_t& a : *axes) a = normalize_axis(n, a, in.rank());
  const Attrs attrs{{"axes", *axes}, {"keepdims", keep}};
  OnnxValue x = n.input(0);
  auto sum = [&](const OnnxValue& v) { return n.op(kernels::sum_op(), attrs, {v}); };
  switch (kind) {
    case Reduce::kSum:
      return n.set_output(0, sum(x));
    case Reduce::kMean:
      return n.set_output(0, n.op(kernels::mean_op(), attrs, {x}));
    case Reduce::kMax:
      return n.set_output(0, n.op(kernels::max_op(), attrs, {x}));
    case Reduce::kMin:
      return n.set_output(0, n.op(kernels::min_op(), attrs, {x}));
    case Reduce::kProd:
      return n.set_output(0, n.op(kernels::prod_op(), attrs, {x}));
    case Reduce::kL1:
      return n.set_output(0, sum(ew1<ew::Abs>(n, x)));
    case Reduce::kL2:
      return n.set_output(0, ew1<ew::Sqrt>(n, sum(ew1<ew::Square>(n, x))));
    case Reduce::kSumSquare:
      return n.set_output(0, sum(ew1<ew::Square>(n, x)));
    case Reduce::kLogSum:
      return n.set_output(0, ew1<ew::Log>(n, sum(x)));
    case Reduce::kLogSumExp: {
      // log(sum(exp(x - max))) + max, the max kept for broadcasting.
      const Attrs kept{{"axes", *axes}, {"keepdims", true}};
      const OnnxValue m = n.op(kernels::max_op(), kept, {x});
      OnnxValue y = ew1<ew::Log>(n, sum(ew1<ew::Exp>(n, ew2<ew::Sub>(n, x, m))));
      const OnnxValue shift = keep ? m : n.op(kernels::max_op(), attrs, {x});
      return n.set_output(0, ew2<ew::Add>(n, y, shift));
    }
  }
}

void convert_arg(Node& n, bool max) {
  const Shape in = n.shape(0);
  OnnxValue x = n.input(0);
  if (!max) {
    if (n.dtype(0) == DType::kBool || n.dtype(0) == DType::kUInt8)
      n.refuse("ArgMin of unsigned values");
    x = ew1<ew::Neg>(n, x);
  }
  const int64_t axis = normalize_axis(n, n.attr_int("axis", 0), in.rank());
  const bool last = n.attr_int("select_last_index", 0) != 0;
  const int64_t dim = in[int(axis)];
  if (last) {
    // The first extreme of the reversed axis is the last one.
    check_host_count(n, dim, "the reversed positions");
    Ints reversed;
    for (int64_t p = dim - 1; p >= 0; --p) reversed.push_back(p);
    x = n.op(kernels::take_op(), {{"axis", axis}},
             {x, n.constant(Tensor::from_vector<int64_t>(reversed, Shape{dim}), true)});
  }
  OnnxValue y = n.op(kernels::argmax_op(),
                     {{"axis", axis}, {"keepdims", n.attr_int("keepdims", 1) != 0}}, {x});
  if (last) y = ew2<ew::Sub>(n, n.scalar(double(dim - 1), DType::kInt64), y);
  n.set_output(0, y);
}

// ---------------------------------------------------------------------------------------------
// Neural-network layers
// ---------------------------------------------------------------------------------------------

void convert_matmul(Node& n) {
  n.set_output(0, n.op(kernels::matmul_op(), {}, {n.input(0), n.input(1)}));
}

void convert_gemm(Node& n) {
  const OnnxValue a = n.input(0);
  OnnxValue y = n.op(kernels::matmul_op(),
                     {{"transpose_a", n.attr_int("transA", 0) != 0},
                      {"transpose_b", n.attr_int("transB", 0) != 0}},
                     {a, n.input(1)});
  const double alpha = n.attr_float("alpha", 1), beta = n.attr_float("beta", 1);
  if (alpha != 1) y = ew2<ew::Mul>(n, y, scalar_like(n, y, alpha));
  if (n.has_input(2) && beta != 0) {
    OnnxValue c = n.input(2);
    if (beta != 1) c = ew2<ew::Mul>(n, c, scalar_like(n, c, beta));
    y = ew2<ew::Add>(n, y, c);
  }
  n.set_output(0, y);
}

// The spatial geometry of a convolution or pooling node, 1-D or 2-D, with
// ONNX's begin/end pads resolved (auto_pad included).
struct Window {
  int spatial = 0;
  Ints kernel, strides, dilations, pads_begin, pads_end;
  bool symmetric() const { return pads_begin == pads_end; }
};

void check_window(Node& n, const Shape& x, const Ints& kernel, const Ints& strides,
                  const Ints& dilations, const Ints& pads) {
  auto within = [&](const Ints& v, int64_t low, std::string_view what) {
    for (int64_t e : v) {
      if (e < low || e > kMaxWindowAttr) {
        n.refuse(str_cat(what, " ", e, " is outside [", low, ", ", kMaxWindowAttr, "]"));
      }
    }
  };
  within(kernel, 1, "a kernel size");
  within(strides, 1, "a stride");
  within(dilations, 1, "a dilation");
  within(pads, 0, "a pad");
  for (int a = 2; a < x.rank(); ++a) {
    if (x[a] > kMaxWindowInput) n.refuse(str_cat("input size ", x[a], " is too large to window"));
  }
}

Window window_of(Node& n, const Shape& x, Ints kernel) {
  Window w;
  w.spatial = x.rank() - 2;
  if (w.spatial < 1 || w.spatial > 3) {
    n.refuse(str_cat(w.spatial, "-D windows are not supported (1-D to 3-D are)"));
  }
  const size_t k = size_t(w.spatial);
  if (kernel.size() != k) n.refuse("kernel_shape does not match the input's rank");
  w.kernel = kernel;
  w.strides = n.attr_ints("strides").value_or(Ints(k, 1));
  w.dilations = n.attr_ints("dilations").value_or(Ints(k, 1));
  Ints pads = n.attr_ints("pads").value_or(Ints(2 * k, 0));
  if (w.strides.size() != k || w.dilations.size() != k || pads.size() != 2 * k) {
    n.refuse("strides, dilations or pads do not match the input's rank");
  }
  check_window(n, x, w.kernel, w.strides, w.dilations, pads);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  w.pads_begin.assign(pads.begin(), pads.begin() + int(k));
  w.pads_end.assign(pads.begin() + int(k), pads.end());
  if (auto_pad == "VALID") {
    w.pads_begin.assign(k, 0);
    w.pads_end.assign(k, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t i = 0; i < k; ++i) {
      const int64_t size = x[int(i) + 2], out = (size + w.strides[i] - 1) / w.strides[i];
      const int64_t extent = (w.kernel[i] - 1) * w.dilations[i] + 1;
      const int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + extent - size);
      const int64_t small = total / 2, large = total - small;
      w.pads_begin[i] = auto_pad == "SAME_UPPER" ? small : large;
      w.pads_end[i] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad != "NOTSET") {
    n.refuse(str_cat("auto_pad '", auto_pad, "'"));
  }
  return w;
}

// 1-D operands as 2-D ones: [N, C, L] -> [N, C, 1, L].
OnnxValue as_2d(Node& n, const OnnxValue& x) {
  Ints d = dims_of(n.meta(x).shape);
  d.insert(d.begin() + 2, 1);
  return reshape(n, x, d);
}
// And back: [N, C, 1, L] -> [N, C, L].
OnnxValue from_2d(Node& n, const OnnxValue& y) {
  Ints d = dims_of(n.meta(y).shape);
  d.erase(d.begin() + 2);
  return reshape(n, y, d);
}
Ints pair(const Window& w, const Ints& v, int64_t fill) {
  return w.spatial == 1 ? Ints{fill, v[0]} : v;
}

// `x` padded explicitly with `value` where the window's pads are asymmetric;
// the window's pads become zero.
OnnxValue pad_explicitly(Node& n, const OnnxValue& x, Window& w, double value) {
  Ints pads(2 * size_t(n.meta(x).shape.rank()), 0);
  for (int i = 0; i < w.spatial; ++i) {
    pads[size_t(2 * (i + 2))] = w.pads_begin[size_t(i)];
    pads[size_t(2 * (i + 2) + 1)] = w.pads_end[size_t(i)];
  }
  w.pads_begin.assign(size_t(w.spatial), 0);
  w.pads_end.assign(size_t(w.spatial), 0);
  return n.op(kernels::pad_op(), {{"pads", pads}, {"value", value}}, {x});
}

// 3-D windows on Tandem's 2-D ops: each depth tap k of the window reads
// the depth positions od * stride + k * dilation of the (explicitly padded)
// input; height and width go through the 2-D op on every such position,
// with the batch and those positions merged, and the taps are combined.
struct DepthTaps {
  int64_t outputs = 0;          // Output depth.
  std::vector<OnnxValue> taps;  // Per tap: [N, C, outputs, H, W].
};

DepthTaps depth_taps(Node& n, const OnnxValue& x, const Window& w) {
  const int64_t depth = n.meta(x).shape[2];
  const int64_t extent = (w.kernel[0] - 1) * w.dilations[0] + 1;
  if (depth < extent) n.refuse("the window is deeper than the padded input");
  DepthTaps d;
  d.outputs = (depth - extent) / w.strides[0] + 1;
  check_host_count(n, checked_mul(d.outputs, w.kernel[0], "the depth taps"), "the depth taps");
  for (int64_t k = 0; k < w.kernel[0]; ++k) {
    Ints positions;
    for (int64_t o = 0; o < d.outputs; ++o)
      positions.push_back(o * w.strides[0] + k * w.dilations[0]);
    d.taps.push_back(
        n.op(kernels::take_op(), {{"axis", int64_t{2}}},
             {x, n.constant(Tensor::from_vector<int64_t>(positions, Shape{d.outputs}))}));
  }
  return d;
}

// [N, C, D, H, W] as [N * D, C, H, W], and back.
OnnxValue depth_into_batch(Node& n, const OnnxValue& x) {
  const Shape s = n.meta(x).shape;
  const OnnxValue t = n.op(kernels::transpose_op(), {{"perm", Ints{0, 2, 1, 3, 4}}}, {x});
  return reshape(n, t, {s[0] * s[2], s[1], s[3], s[4]});
}
OnnxValue depth_out_of_batch(Node& n, const OnnxValue& y, int64_t batch, int64_t depth) {
  const Shape s = n.meta(y).shape;
  const OnnxValue r = reshape(n, y, {batch, depth, s[1], s[2], s[3]});
  return n.op(kernels::transpose_op(), {{"perm", Ints{0, 2, 1, 3, 4}}}, {r});
}

// The height-and-width part of a 3-D window.
Window plane_of(const Window& w) {
  Window p;
  p.spatial = 2;
  p.kernel = {w.kernel[1], w.kernel[2]};
  p.strides = {w.strides[1], w.strides[2]};
  p.dilations = {w.dilations[1], w.dilations[2]};
  p.pads_begin = {w.pads_begin[1], w.pads_begin[2]};
  p.pads_end = {w.pads_end[1], w.pads_end[2]};
  return p;
}

OnnxValue convolution3d(Node& n, const OnnxValue& input, const OnnxValue& weight, Window w) {
  const Shape ws = n.meta(weight).shape;
  const int64_t batch = n.meta(input).shape[0], groups = n.attr_int("group", 1);
  const OnnxValue x = pad_explicitly(n, input, w, 0);
  const Window plane = plane_of(w);
  const DepthTaps d = depth_taps(n, x, w);
  const OnnxValue zero_bias = n.op(
      kernels::full_op(), {{"shape", Ints{ws[0]}}, {"dtype", n.meta(x).dtype}, {"value", 0.0}}, {});
  OnnxValue sum;
  for (size_t k = 0; k < d.taps.size(); ++k) {
    const OnnxValue tap_weight = reshape(n,
                                         n.op(kernels::slice_op(),
                                              {{"axis", int64_t{2}},
                                               {"begin", int64_t(k)},
                                               {"end", int64_t(k) + 1},
                                               {"step", int64_t{1}}},
                                              {weight}),
                                         {ws[0], ws[1], ws[3], ws[4]});
    const OnnxValue y = n.op(kernels::conv2d_op(),
                             {{"stride", plane.strides},
                              {"padding", Ints{0, 0}},
                              {"dilation", plane.dilations},
                              {"groups", groups}},
                             {depth_into_batch(n, d.taps[k]), tap_weight, zero_bias});
    sum = k == 0 ? y : ew2<ew::Add>(n, sum, y);
  }
  return depth_out_of_batch(n, sum, batch, d.outputs);
}

}  // namespace

OnnxValue convolution(Node& n, const OnnxValue& input, const OnnxValue& weight,
                      std::optional<OnnxValue> bias) {
  const Shape xs = n.meta(input).shape, ws = n.meta(weight).shape;
  if (ws.rank() != xs.rank()) n.refuse("the weight's rank differs from the input's");
  Ints kernel = n.attr_ints("kernel_shape").value_or(Ints(ws.begin() + 2, ws.end()));
  Window w = window_of(n, xs, kernel);
  if (w.spatial == 3) {
    const OnnxValue y = convolution3d(n, input, weight, w);
    return bias ? ew2<ew::Add>(n, y, reshape(n, *bias, {ws[0], 1, 1, 1})) : y;
  }
  OnnxValue x = input, w2d = weight;
  if (!w.symmetric()) x = pad_explicitly(n, x, w, 0);
  const bool one_d = w.spatial == 1;
  if (one_d) {
    x = as_2d(n, x);
    w2d = as_2d(n, w2d);
  }
  if (!bias) {
    bias = n.op(kernels::full_op(),
                {{"shape", Ints{ws[0]}}, {"dtype", n.meta(x).dtype}, {"value", 0.0}}, {});
  }
  OnnxValue y = n.op(kernels::conv2d_op(),
                     {{"stride", pair(w, w.strides, 1)},
                      {"padding", pair(w, w.pads_begin, 0)},
                      {"dilation", pair(w, w.dilations, 1)},
                      {"groups", n.attr_int("group", 1)}},
                     {x, w2d, *bias});
  return one_d ? from_2d(n, y) : y;
}

namespace {

void convert_conv(Node& n) {
  n.set_output(0, convolution(n, n.input(0), n.input(1), optional_input(n, 2)));
}

void convert_conv_transpose(Node& n) {
  const Shape xs = n.shape(0), ws = n.shape(1);
  if (ws.rank() != xs.rank()) n.refuse("the weight's rank differs from the input's");
  const Ints kernel = n.attr_ints("kernel_shape").value_or(Ints(ws.begin() + 2, ws.end()));
  const int spatial = xs.rank() - 2;
  if (spatial != 1 && spatial != 2) n.refuse("only 1-D and 2-D transposed convolutions");
  const size_t k = size_t(spatial);
  Window w;
  w.spatial = spatial;
  w.kernel = kernel;
  w.strides = n.attr_ints("strides").value_or(Ints(k, 1));
  w.dilations = n.attr_ints("dilations").value_or(Ints(k, 1));
  Ints output_padding = n.attr_ints("output_padding").value_or(Ints(k, 0));
  Ints pads = n.attr_ints("pads").value_or(Ints(2 * k, 0));
  const int64_t groups = n.attr_int("group", 1);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (w.strides.size() != k || w.dilations.size() != k || pads.size() != 2 * k ||
      output_padding.size() != k) {
    n.refuse("strides, dilations, pads or output_padding do not match the input's rank");
  }
  if (kernel.size() != k) n.refuse("kernel_shape does not match the input's rank");
  check_window(n, xs, kernel, w.strides, w.dilations, pads);
  for (int64_t p : output_padding) {
    if (p < 0 || p > kMaxWindowAttr) n.refuse(str_cat("output_padding ", p, " is out of range"));
  }
  // The full output size of each axis, then what to cut at each end.
  std::optional<Ints> output_shape = n.attr_ints("output_shape");
  for (size_t i = 0; i < k; ++i) {
    const int64_t full = w.strides[i] * (xs[int(i) + 2] - 1) + output_padding[i] +
                         (kernel[i] - 1) * w.dilations[i] + 1;
    if (output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      if (output_shape && output_shape->size() < k) n.refuse("output_shape is too short");
      if (output_shape) {
        for (int64_t e : *output_shape) {
          if (e < 0 || e > kMaxWindowInput)
            n.refuse(str_cat("output_shape ", e, " is out of range"));
        }
      }
      const int64_t want = output_shape ? (*output_shape)[output_shape->size() - k + i]
                                        : xs[int(i) + 2] * w.strides[i];
      const int64_t total = full - want;  // Negative: the output grows past the full one.
      const bool lower_first = auto_pad == "SAME_LOWER";
      pads[i] = lower_first ? total - total / 2 : total / 2;
      pads[i + k] = total - pads[i];
    } else if (auto_pad == "VALID") {
      pads[i] = pads[i + k] = 0;
    }
  }
  // Negative pads (an output_shape larger than the full output) add
  // positions no input reaches: zeros, plus the bias.
  Ints grow(2 * k, 0);
  for (size_t i = 0; i < 2 * k; ++i) {
    if (pads[i] < 0) {
      grow[i] = -pads[i];
      pads[i] = 0;
    }
  }
  const bool grows = grow != Ints(2 * k, 0);
  w.pads_begin.assign(pads.begin(), pads.begin() + int(k));
  w.pads_end.assign(pads.begin() + int(k), pads.end());
  // Tandem's padding cuts both ends equally: cut the larger end's excess
  // by output_padding-like growth, then slice what remains.
  Ints extra_end(k, 0);
  for (size_t i = 0; i < k; ++i) {
    if (w.pads_end[i] < w.pads_begin[i]) {
      // A larger begin pad: pad symmetrically by the end pad, then drop
      // the difference at the begin.
      extra_end[i] = -(w.pads_begin[i] - w.pads_end[i]);
      w.pads_begin[i] = w.pads_end[i];
    } else {
      extra_end[i] = w.pads_end[i] - w.pads_begin[i];
      w.pads_end[i] = w.pads_begin[i];
    }
  }
  OnnxValue x = n.input(0), weight = n.input(1);
  const bool one_d = spatial == 1;
  if (one_d) {
    x = as_2d(n, x);
    weight = as_2d(n, weight);
  }
  const OnnxValue zero_bias =
      n.op(kernels::full_op(),
           {{"shape", Ints{ws[1] * groups}}, {"dtype", n.dtype(0)}, {"value", 0.0}}, {});
  const OnnxValue bias = n.has_input(2) && !grows ? n.input(2) : zero_bias;
  OnnxValue y = n.op(kernels::conv_transpose2d_op(),
                     {{"stride", pair(w, w.strides, 1)},
                      {"padding", pair(w, w.pads_begin, 0)},
                      {"dilation", pair(w, w.dilations, 1)},
                      {"output_padding", pair(w, output_padding, 0)},
                      {"groups", groups}},
                     {x, weight, bias});
  if (one_d) y = from_2d(n, y);
  for (size_t i = 0; i < k; ++i) {
    const int64_t axis = int64_t(i) + 2, dim = n.meta(y).shape[int(axis)];
    if (extra_end[i] > 0) {
      y = n.op(kernels::slice_op(),
               {{"axis", axis},
                {"begin", int64_t{0}},
                {"end", dim - extra_end[i]},
                {"step", int64_t{1}}},
               {y});
    } else if (extra_end[i] < 0) {
      y = n.op(kernels::slice_op(),
               {{"axis", axis}, {"begin", -extra_end[i]}, {"end", dim}, {"step", int64_t{1}}}, {y});
    }
  }
  if (grows) {
    Ints padding(2 * size_t(xs.rank()), 0);
    for (size_t i = 0; i < k; ++i) {
      padding[2 * (i + 2)] = grow[i];
      padding[2 * (i + 2) + 1] = grow[i + k];
    }
    y = n.op(kernels::pad_op(), {{"pads", padding}, {"value", 0.0}}, {y});
    if (n.has_input(2)) {
      Ints channel(size_t(xs.rank() - 1), 1);
      channel[0] = ws[1] * groups;
      y = ew2<ew::Add>(n, y, reshape(n, n.input(2), channel));
    }
  }
  n.set_output(0, y);
}

// The output size of a pooling window along one axis, floor or ceil.
int64_t pooled(int64_t size, int64_t pads, int64_t kernel, int64_t stride, int64_t dilation,
               bool ceil_mode) {
  const int64_t span = size + pads - ((kernel - 1) * dilation + 1);
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // The last window must start inside the input or its begin pad.
  if (ceil_mode && (out - 1) * stride >= size + pads / 2) --out;
  return out;
}

// MaxPool's Indices: where in x, flattened, each window's maximum is (the
// plane's row-major index, or column-major with storage_order = 1, plus
// the plane's offset), from the index of the maximum in its plane.
OnnxValue max_pool_indices(Node& n, const OnnxValue& x, const Window& w) {
  const bool within_half_windows = [&] {
    for (int i = 0; i < w.spatial; ++i) {
      if (2 * w.pads_begin[size_t(i)] > w.kernel[size_t(i)]) return false;
    }
    return true;
  }();
  if (w.spatial != 2 || !w.symmetric() || !within_half_windows) {
    n.refuse("the Indices output needs a 2-D window padded evenly by at most half a window");
  }
  const Shape xs = n.meta(x).shape;
  const OnnxValue plane = n.op(kernels::max_pool2d_indices_op(),
                               {{"kernel", w.kernel},
                                {"stride", w.strides},
                                {"padding", w.pads_begin},
                                {"dilation", w.dilations}},
                               {x});
  OnnxValue at = plane;
  if (n.attr_int("storage_order", 0) != 0) {
    const OnnxValue row = ew2<ew::Div>(n, plane, scalar_like(n, plane, double(xs[3])));
    const OnnxValue column =
        ew2<ew::Sub>(n, plane, ew2<ew::Mul>(n, row, scalar_like(n, plane, double(xs[3]))));
    at = ew2<ew::Add>(n, ew2<ew::Mul>(n, column, scalar_like(n, plane, double(xs[2]))), row);
  }
  const int64_t planes = checked_mul(xs[0], xs[1], "the planes");
  check_host_count(n, planes, "the planes' offsets");
  const int64_t plane_size = checked_mul(xs[2], xs[3], "a plane");
  Ints offsets;
  for (int64_t p = 0; p < planes; ++p) offsets.push_back(checked_mul(p, plane_size, "an offset"));
  return ew2<ew::Add>(n, at,
                      n.constant(Tensor::from_vector<int64_t>(offsets, Shape{xs[0], xs[1], 1, 1})));
}

void convert_pool(Node& n, bool max) {
  const Shape xs = n.shape(0);
  const std::optional<Ints> kernel = n.attr_ints("kernel_shape");
  if (!kernel) n.refuse("kernel_shape is required");
  Window w = window_of(n, xs, *kernel);
  if (!max && w.dilations != Ints(size_t(w.spatial), 1)) n.refuse("dilated AveragePool");
  bool include_pad = max || n.attr_int("count_include_pad", 0) != 0;
  if (n.attr_int("ceil_mode", 0) != 0) {
    // The last, partial windows: pad the end so that they are whole, with
    // what a max ignores, or, for a mean over the input's positions only,
    // with zeros the division by each window's share leaves out.
    for (int i = 0; i < w.spatial; ++i) {
      const size_t s = size_t(i);
      const int64_t pads = w.pads_begin[s] + w.pads_end[s];
      const int64_t ceil = pooled(xs[i + 2], pads, w.kernel[s], w.strides[s], w.dilations[s], true);
      const int64_t floor =
          pooled(xs[i + 2], pads, w.kernel[s], w.strides[s], w.dilations[s], false);
      if (ceil == floor) continue;
      if (!max && include_pad)
        n.refuse("ceil_mode = 1 with count_include_pad = 1 where it changes the output size");
      const int64_t extent = (w.kernel[s] - 1) * w.dilations[s] + 1;
      w.pads_end[s] += (ceil - 1) * w.strides[s] + extent - (xs[i + 2] + pads);
    }
  }
  const Ints no_pads(size_t(w.spatial), 0);
  const bool padded = w.pads_begin != no_pads || w.pads_end != no_pads;
  // Integers pool in float64, which holds every uint8 and int32 exactly.
  const DType dtype = n.dtype(0);
  OnnxValue x = max && (dtype == DType::kUInt8 || dtype == DType::kInt32)
                    ? cast(n, n.input(0), DType::kFloat64)
                    : n.input(0);
  const double fill = max ? -std::numeric_limits<double>::infinity() : 0.0;
  auto pool = [&](OnnxValue v, Window win, double pad_value) {
    // Tandem's pools pad at most half a window, symmetrically; ONNX's may
    // pad more, or unevenly: then the padding is an op of its own.
    bool explicit_pads = !win.symmetric();
    for (int i = 0; i < win.spatial; ++i) {
      explicit_pads = explicit_pads || 2 * win.pads_begin[size_t(i)] > win.kernel[size_t(i)];
    }
    if (win.spatial == 3) {
      // Height and width pooled at every depth position, then the depth
      // taps combined: max, or the mean (sum over the kernel's depth).
      v = pad_explicitly(n, v, win, pad_value);
      const Shape s = n.meta(v).shape;
      const Window plane = plane_of(win);
      Attrs attrs{{"kernel", plane.kernel}, {"stride", plane.strides}, {"padding", Ints{0, 0}}};
      if (max) attrs.set("dilation", plane.dilations);
      OnnxValue planes = n.op(max ? kernels::max_pool2d_op() : kernels::avg_pool2d_op(), attrs,
                              {reshape(n, v, {s[0], s[1] * s[2], s[3], s[4]})});
      const Shape ps = n.meta(planes).shape;
      planes = reshape(n, planes, {s[0], s[1], s[2], ps[2], ps[3]});
      const DepthTaps d = depth_taps(n, planes, win);
      OnnxValue y = d.taps[0];
      for (size_t k = 1; k < d.taps.size(); ++k) {
        y = max ? ew2<ew::Maximum>(n, y, d.taps[k]) : ew2<ew::Add>(n, y, d.taps[k]);
      }
      if (!max) y = ew2<ew::Div>(n, y, scalar_like(n, y, double(win.kernel[0])));
      return y;
    }
    if (explicit_pads) v = pad_explicitly(n, v, win, pad_value);
    const bool one_d = win.spatial == 1;
    if (one_d) v = as_2d(n, v);
    Attrs attrs{{"kernel", pair(win, win.kernel, 1)},
                {"stride", pair(win, win.strides, 1)},
                {"padding", pair(win, win.pads_begin, 0)}};
    if (max) attrs.set("dilation", pair(win, win.dilations, 1));
    OnnxValue y = n.op(max ? kernels::max_pool2d_op() : kernels::avg_pool2d_op(), attrs, {v});
    if (one_d) y = from_2d(n, y);
    return y;
  };
  OnnxValue y = pool(x, w, fill);
  if (!include_pad && padded) {
    // Mean over the window's input positions only: divide by the share of
    // each window that lies in the input (the pool of ones, known at import).
    Ints ones_shape = dims_of(xs);
    ones_shape[0] = ones_shape[1] = 1;
    const OnnxValue ones = n.op(kernels::full_op(),
                                {{"shape", ones_shape}, {"dtype", n.dtype(0)}, {"value", 1.0}}, {});
    OnnxValue share = pool(ones, w, 0.0);
    share.from_sizes = true;
    y = ew2<ew::Div>(n, y, share);
  }
  n.set_output(0, cast(n, y, dtype));
  if (n.wants_output(1)) n.set_output(1, max_pool_indices(n, x, w));
}

void convert_global_pool(Node& n, bool max) {
  const Shape xs = n.shape(0);
  if (xs.rank() < 3) n.refuse("the input must be [N, C, spatial...]");
  Ints axes;
  for (int a = 2; a < xs.rank(); ++a) axes.push_back(a);
  n.set_output(0, n.op(max ? kernels::max_op() : kernels::mean_op(),
                       {{"axes", axes}, {"keepdims", true}}, {n.input(0)}));
}

// [C] per-channel values shaped to broadcast over [N, C, spatial...].
OnnxValue per_channel(Node& n, const OnnxValue& v, int rank) {
  Ints d(size_t(rank - 1), 1);
  d[0] = n.meta(v).shape.numel();
  return reshape(n, v, d);
}

// Training mode (opset 14 on): normalized with the batch's mean and
// (biased) variance, which also update the running statistics (outputs 1
// and 2) with the node's momentum.
void convert_batch_norm_training(Node& n) {
  const OnnxValue x = n.input(0);
  const int64_t rank = n.shape(0).rank();
  if (rank < 2) n.refuse("x must have a channel axis");
  Ints axes = all_axes(rank);
  axes.erase(axes.begin() + 1);
  const Attrs reduced{{"axes", axes}, {"keepdims", false}};
  const OnnxValue mean = n.op(kernels::mean_op(), reduced, {x});
  const OnnxValue centered = ew2<ew::Sub>(n, x, per_channel(n, mean, int(rank)));
  const OnnxValue var = n.op(kernels::mean_op(), reduced, {ew1<ew::Square>(n, centered)});
  const std::vector<OnnxValue> y =
      n.ops(kernels::batch_norm_op(), {{"training", false}, {"eps", n.attr_float("epsilon", 1e-5)}},
            {x, n.input(1), n.input(2), mean, var});
  n.set_output(0, y[0]);
  const double momentum = n.attr_float("momentum", 0.9);
  auto running = [&](size_t input, const OnnxValue& batch) {
    return ew2<ew::Add>(n, ew2<ew::Mul>(n, n.input(input), scalar_like(n, batch, momentum)),
                        ew2<ew::Mul>(n, batch, scalar_like(n, batch, 1 - momentum)));
  };
  n.set_output(1, running(3, mean));
  n.set_output(2, running(4, var));
}

void convert_batch_norm(Node& n) {
  if (n.attr_int("training_mode", 0) != 0) return convert_batch_norm_training(n);
  if (n.opset() < 9 && n.attr_int("spatial", 1) == 0) n.refuse("spatial = 0 is not supported");
  if (n.opset() < 7 && n.attr_int("is_test", 0) == 0)
    n.refuse("is_test = 0 (training) is not supported");
  for (size_t i = 1; i < n.num_outputs(); ++i) {
    if (n.wants_output(i)) n.refuse("the running statistics' outputs (training) are not supported");
  }
  const std::vector<OnnxValue> y =
      n.ops(kernels::batch_norm_op(), {{"training", false}, {"eps", n.attr_float("epsilon", 1e-5)}},
            {n.input(0), n.input(1), n.input(2), n.input(3), n.input(4)});
  n.set_output(0, y[0]);
}

// (x - mean) / sqrt(var + eps) over `axes`, with the statistics kept.
struct Normalized {
  OnnxValue y, mean, inv_std;
};
Normalized normalize(Node& n, const OnnxValue& x, const Ints& axes, double eps) {
  const Attrs kept{{"axes", axes}, {"keepdims", true}};
  const OnnxValue mean = n.op(kernels::mean_op(), kept, {x});
  const OnnxValue centered = ew2<ew::Sub>(n, x, mean);
  const OnnxValue var = n.op(kernels::mean_op(), kept, {ew1<ew::Square>(n, centered)});
  const OnnxValue inv = ew1<ew::Rsqrt>(n, ew2<ew::Add>(n, var, scalar_like(n, var, eps)));
  return {ew2<ew::Mul>(n, centered, inv), mean, inv};
}

void convert_instance_norm(Node& n) {
  const Shape xs = n.shape(0);
  if (xs.rank() < 3) n.refuse("the input must be [N, C, spatial...]");
  Ints axes;
  for (int a = 2; a < xs.rank(); ++a) axes.push_back(a);
  const Normalized z = normalize(n, n.input(0), axes, n.attr_float("epsilon", 1e-5));
  const OnnxValue scaled = ew2<ew::Mul>(n, z.y, per_channel(n, n.input(1), xs.rank()));
  n.set_output(0, ew2<ew::Add>(n, scaled, per_channel(n, n.input(2), xs.rank())));
}

void convert_layer_norm(Node& n) {
  const Shape xs = n.shape(0);
  const int64_t axis = normalize_axis(n, n.attr_int("axis", -1), xs.rank());
  const double eps = n.attr_float("epsilon", 1e-5);
  const Shape normalized(Ints(xs.begin() + axis, xs.end()));
  const bool plain = !n.wants_output(1) && !n.wants_output(2) && n.dtype(0) == DType::kFloat32 &&
                     n.shape(1) == normalized && (!n.has_input(2) || n.shape(2) == normalized);
  if (plain) {
    const OnnxValue beta =
        n.has_input(2)
            ? n.input(2)
            : n.op(kernels::full_op(),
                   {{"shape", dims_of(normalized)}, {"dtype", n.dtype(0)}, {"value", 0.0}}, {});
    return n.set_output(
        0, n.op(kernels::layer_norm_op(), {{"normalized_axes", xs.rank() - axis}, {"eps", eps}},
                {n.input(0), n.input(1), beta}));
  }
  Ints axes;
  for (int64_t a = axis; a < xs.rank(); ++a) axes.push_back(a);
  const Normalized z = normalize(n, n.input(0), axes, eps);
  OnnxValue y = ew2<ew::Mul>(n, z.y, n.input(1));
  if (n.has_input(2)) y = ew2<ew::Add>(n, y, n.input(2));
  n.set_output(0, y);
  n.set_output(1, z.mean);
  n.set_output(2, z.inv_std);
}

void convert_mean_variance_norm(Node& n) {
  const Ints axes = n.attr_ints("axes").value_or(Ints{0, 2, 3});
  const Shape xs = n.shape(0);
  Ints normalized;
  for (int64_t a : axes) normalized.push_back(normalize_axis(n, a, xs.rank()));
  const Attrs kept{{"axes", normalized}, {"keepdims", true}};
  const OnnxValue x = n.input(0);
  const OnnxValue centered = ew2<ew::Sub>(n, x, n.op(kernels::mean_op(), kept, {x}));
  const OnnxValue var = n.op(kernels::mean_op(), kept, {ew1<ew::Square>(n, centered)});
  const OnnxValue std = ew1<ew::Sqrt>(n, var);
  n.set_output(0, ew2<ew::Div>(n, centered, ew2<ew::Add>(n, std, scalar_like(n, std, 1e-9))));
}

void convert_lrn(Node& n) {
  const Shape xs = n.shape(0);
  if (xs.rank() < 3) n.refuse("the input must be [N, C, spatial...]");
  const int64_t size = n.attr_int("size", 0);
  if (size < 1) n.refuse("size must be positive");
  const double alpha = n.attr_float("alpha", 1e-4), beta = n.attr_float("beta", 0.75),
               bias = n.attr_float("bias", 1.0);
  // The sum of squares over a window of channels: an average pool over
  // [N, 1, C, rest], padded by the window's halves.
  const int64_t N = xs[0], C = xs[1], rest = N * C == 0 ? 0 : xs.numel() / (N * C);
  const OnnxValue x = n.input(0);
  OnnxValue sq = reshape(n, ew1<ew::Square>(n, x), {N, 1, C, rest});
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  sq = n.op(kernels::pad_op(), {{"pads", Ints{0, 0, 0, 0, before, after, 0, 0}}, {"value", 0.0}},
            {sq});
  OnnxValue sum =
      n.op(kernels::avg_pool2d_op(),
           {{"kernel", Ints{size, 1}}, {"stride", Ints{1, 1}}, {"padding", Ints{0, 0}}}, {sq});
  sum = reshape(n, sum, dims_of(xs));
  // x / (bias + alpha / size * sum)^beta, the pool's mean being sum / size.
  const OnnxValue base =
      ew2<ew::Add>(n, ew2<ew::Mul>(n, sum, scalar_like(n, x, alpha)), scalar_like(n, x, bias));
  n.set_output(0, ew2<ew::Div>(n, x, ew2<ew::Pow>(n, base, scalar_like(n, x, beta))));
}

// Softmax, LogSoftmax, Hardmax: before opset 13 over the input flattened to
// [outer, inner] at `axis` (default 1), since over one axis (default -1).
void convert_softmax(Node& n, int kind) {
  const Shape xs = n.shape(0);
  const bool coerced = n.opset() < 13;
  const int64_t axis = normalize_axis(n, n.attr_int("axis", coerced ? 1 : -1), xs.rank());
  OnnxValue x = n.input(0);
  int64_t along = axis;
  if (coerced && !(axis == xs.rank() - 1)) {
    const Ints d = dims_of(xs);
    x = reshape(n, x, {product(d, 0, size_t(axis)), product(d, size_t(axis), d.size())});
    along = 1;
  }
  OnnxValue y;
  if (kind == 0) y = n.op(kernels::softmax_op(), {{"axis", along}}, {x});
  if (kind == 1) y = n.op(kernels::log_softmax_op(), {{"axis", along}}, {x});
  if (kind == 2) {
    const Shape s = n.meta(x).shape;
    const int64_t classes = s[int(along)];
    OnnxValue hot =
        n.op(kernels::one_hot_op(), {{"num_classes", classes}, {"dtype", n.meta(x).dtype}},
             {n.op(kernels::argmax_op(), {{"axis", along}, {"keepdims", false}}, {x})});
    if (along != s.rank() - 1) {
      hot = n.op(kernels::transpose_op(), {{"perm", last_axis_to(along, s.rank())}}, {hot});
    }
    y = hot;
  }
  n.set_output(0, reshape(n, y, dims_of(xs)));
}

// Resize and Upsample, separably: along each resized axis, every output
// position reads a few input positions (1 nearest, 2 linear, 4 cubic) with
// weights, computed at import as ONNX's reference does (the coordinate
// transformation, the neighbours of the edge-padded axis, exclude_outside),
// and the graph takes them: sum over taps of take(x, taps) * weights.
struct AxisTaps {
  std::vector<Ints> index;                  // Per tap, per output position.
  std::vector<std::vector<double>> weight;  // The same.
  std::vector<bool> outside;  // Per output position: its source lies beyond the input.
};

struct ResizeOptions {
  std::string mode, transform, nearest_mode;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  // tf_crop_and_resize: the region (starts then ends, per axis, as
  // fractions of the input) and the value of positions beyond the input.
  std::vector<double> roi;
  double extrapolation = 0;
};

AxisTaps resize_taps(Node& n, int64_t in, int64_t out, double scale, const ResizeOptions& options,
                     size_t axis) {
  const std::string &mode = options.mode, &transform = options.transform,
                    &nearest_mode = options.nearest_mode;
  const double cubic_a = options.cubic_a;
  const bool exclude_outside = options.exclude_outside;
  const int taps = mode == "nearest" ? 1 : mode == "linear" ? 2 : 4;
  AxisTaps t{std::vector<Ints>(size_t(taps)), std::vector<std::vector<double>>(size_t(taps))};
  // ONNX's length of the resized axis is in * scale, unrounded.
  const double length = double(in) * scale;
  for (int64_t o = 0; o < out; ++o) {
    const double x = double(o);
    double s = 0;
    if (transform == "half_pixel") {
      s = (x + 0.5) / scale - 0.5;
    } else if (transform == "pytorch_half_pixel") {
      s = length > 1 ? (x + 0.5) / scale - 0.5 : 0;
    } else if (transform == "align_corners") {
      s = length == 1 ? 0 : x * double(in - 1) / (length - 1);
    } else if (transform == "asymmetric") {
      s = x / scale;
    } else if (transform == "tf_half_pixel_for_nn") {
      s = (x + 0.5) / scale;
    } else if (transform == "tf_crop_and_resize") {
      const size_t rank = options.roi.size() / 2;
      const double start = options.roi[axis], end = options.roi[axis + rank];
      s = out > 1 ? start * double(in - 1) + x * (end - start) * double(in - 1) / double(out - 1)
                  : 0.5 * (start + end) * double(in - 1);
      t.outside.push_back(s < 0 || s > double(in - 1));
    } else {
      n.refuse(str_cat("coordinate_transformation_mode '", transform, "'"));
    }
    if (taps == 1) {
      double r = 0;
      if (nearest_mode == "round_prefer_floor") {
        r = s == std::floor(s) + 0.5 ? std::floor(s) : std::round(s);
      } else if (nearest_mode == "round_prefer_ceil") {
        r = std::round(s);
      } else if (nearest_mode == "floor") {
        r = std::floor(s);
      } else if (nearest_mode == "ceil") {
        r = std::ceil(s);
      } else {
        n.refuse(str_cat("nearest_mode '", nearest_mode, "'"));
      }
      t.index[0].push_back(std::clamp<int64_t>(int64_t(r), 0, in - 1));
      t.weight[0].push_back(1);
      continue;
    }
    const double low = std::floor(s);
    const double ratio = s == low ? 1.0 : s - low;
    std::vector<double> c;
    if (taps == 2) {
      c = {1 - ratio, ratio};
    } else {
      const double a = cubic_a, r = ratio, q = 1 - ratio;
      c = {((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
           ((a + 2) * r - (a + 3)) * r * r + 1, ((a + 2) * q - (a + 3)) * q * q + 1,
           ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a};
    }
    // The taps nearest s, ties to the smaller index: for a whole s, s itself
    // is the last-but-(taps / 2 - 1) of them, which ratio = 1 weighs.
    const int64_t first = int64_t(low) - (s == low ? taps / 2 : taps / 2 - 1);
    double total = 0;
    for (int k = 0; k < taps; ++k) {
      const int64_t p = first + k;
      if (exclude_outside && (p < 0 || p >= in)) c[size_t(k)] = 0;
      total += c[size_t(k)];
    }
    for (int k = 0; k < taps; ++k) {
      t.index[size_t(k)].push_back(std::clamp<int64_t>(first + k, 0, in - 1));
      t.weight[size_t(k)].push_back(exclude_outside ? c[size_t(k)] / total : c[size_t(k)]);
    }
  }
  return t;
}

void resize(Node& n, const Ints& sizes, const std::vector<double>& scales,
            const ResizeOptions& options) {
  const std::string& mode = options.mode;
  const Shape in = n.shape(0);
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    n.refuse(str_cat("mode '", mode, "'"));
  if (mode != "nearest" && !is_floating_point(n.dtype(0))) n.refuse("interpolation of integers");
  OnnxValue y = n.input(0);
  for (int a = 0; a < in.rank(); ++a) {
    const int64_t from = in[a], to = sizes[size_t(a)];
    if (from == to && scales[size_t(a)] == 1.0) continue;
    if (from == 0 || to == 0) n.refuse("resizing an empty axis");
    check_host_count(n, to, "a resized axis");
    const AxisTaps t = resize_taps(n, from, to, scales[size_t(a)], options, size_t(a));
    Ints weight_shape(size_t(in.rank()), 1);
    weight_shape[size_t(a)] = to;
    OnnxValue sum;
    for (size_t k = 0; k < t.index.size(); ++k) {
      const OnnxValue index = n.constant(Tensor::from_vector<int64_t>(t.index[k], Shape{to}), true);
      OnnxValue picked = n.op(kernels::take_op(), {{"axis", int64_t{a}}}, {y, index});
      if (mode != "nearest") {
        const Tensor w = Tensor::from_vector<double>(t.weight[k], Shape(weight_shape));
        picked = ew2<ew::Mul>(n, picked, cast(n, n.constant(w, true), n.dtype(0)));
      }
      sum = k == 0 ? picked : ew2<ew::Add>(n, sum, picked);
    }
    y = sum;
    // Positions whose source lies beyond the input take the extrapolation
    // value, along every axis (weights summing to one keep it so).
    if (std::find(t.outside.begin(), t.outside.end(), true) != t.outside.end()) {
      Ints flags(t.outside.begin(), t.outside.end());
      const OnnxValue outside =
          cast(n, n.constant(Tensor::from_vector<int64_t>(flags, Shape(weight_shape)), true),
               DType::kBool);
      y = n.op(kernels::where_op(), {}, {outside, scalar_like(n, y, options.extrapolation), y});
    }
  }
  n.set_output(0, y);
}

// Output sizes and scales from a scales vector: floor(size * scale).
void sizes_from_scales(Node& n, const std::vector<double>& scales, Ints& sizes) {
  const Shape in = n.shape(0);
  if (int64_t(scales.size()) != in.rank()) n.refuse("scales must have one value per axis");
  sizes.clear();
  for (int a = 0; a < in.rank(); ++a) {
    if (!(scales[size_t(a)] > 0) || !std::isfinite(scales[size_t(a)])) {
      n.refuse("scales must be positive and finite");
    }
    sizes.push_back(integral(n, std::floor(double(in[a]) * scales[size_t(a)]), "a resized size"));
  }
}

std::vector<double> known_doubles(Node& n, size_t i, std::string_view what) {
  const Tensor t = n.known(i, what);
  return kernels::call1(kernels::cast_op(), {t}, {{"dtype", DType::kFloat64}}, {})
      .to_vector<double>();
}

void convert_resize(Node& n) {
  const Shape in = n.shape(0);
  const std::string mode = n.attr_string("mode", "nearest");
  std::string transform = n.attr_string("coordinate_transformation_mode", "half_pixel");
  std::string nearest_mode = n.attr_string("nearest_mode", "round_prefer_floor");
  if (n.opset() < 11) {
    // Resize-10 is Upsample-9: asymmetric coordinates, nearest by floor.
    transform = "asymmetric";
    nearest_mode = "floor";
  }
  ResizeOptions options{mode, transform, nearest_mode, n.attr_float("cubic_coeff_a", -0.75),
                        n.attr_int("exclude_outside", 0) != 0};
  if (transform == "tf_crop_and_resize") {
    options.roi = known_doubles(n, 1, "roi");
    if (int64_t(options.roi.size()) != 2 * in.rank()) n.refuse("roi must have two values per axis");
    options.extrapolation = n.attr_float("extrapolation_value", 0);
  }
  Ints sizes;
  std::vector<double> scales;
  const size_t scales_input = n.opset() < 11 ? 1 : 2;
  if (n.opset() >= 11 && n.has_input(3)) {
    sizes = n.known_ints(3, "sizes");
    if (int64_t(sizes.size()) != in.rank()) n.refuse("sizes must have one value per axis");
    for (int a = 0; a < in.rank(); ++a) {
      if (sizes[size_t(a)] < 0) n.refuse("sizes must not be negative");
      scales.push_back(in[a] == 0 ? 1.0 : double(sizes[size_t(a)]) / double(in[a]));
    }
  } else {
    scales = known_doubles(n, scales_input, "scales");
    sizes_from_scales(n, scales, sizes);
  }
  resize(n, sizes, scales, options);
}

void convert_upsample(Node& n) {
  std::vector<double> scales;
  if (n.opset() < 9) {
    const std::optional<std::vector<float>> given = n.attr_floats("scales");
    if (!given) n.refuse("scales are required");
    scales.assign(given->begin(), given->end());
  } else {
    scales = known_doubles(n, 1, "scales");
  }
  Ints sizes;
  sizes_from_scales(n, scales, sizes);
  resize(n, sizes, scales, {n.attr_string("mode", "nearest"), "asymmetric", "floor"});
}

enum class RecurrentKind { kRnn, kLstm, kGru };

void convert_cumsum(Node& n) {
  const int64_t axis =
      normalize_axis(n, integral(n, n.known_scalar(1, "axis"), "axis"), n.shape(0).rank());
  n.set_output(0, n.op(kernels::cumsum_op(),
                       {{"axis", axis},
                        {"exclusive", n.attr_int("exclusive", 0) != 0},
                        {"reverse", n.attr_int("reverse", 0) != 0}},
                       {n.input(0)}));
}

void convert_topk(Node& n) {
  int64_t k = n.attr_int("k", 0);
  if (n.opset() >= 10) {
    const Ints given = n.known_ints(1, "K");
    if (given.size() != 1) n.refuse("K must hold one value");
    k = given[0];
  }
  const int64_t axis = normalize_axis(n, n.attr_int("axis", -1), n.shape(0).rank());
  const std::vector<OnnxValue> y =
      n.ops(kernels::topk_op(),
            {{"k", k}, {"axis", axis}, {"largest", n.attr_int("largest", 1) != 0}}, {n.input(0)});
  n.set_output(0, y[0]);
  n.set_output(1, y[1]);
}

// NegativeLogLikelihoodLoss of log-probabilities [N, C, d...] at int
// targets [N, d...]: -input[n, target[n, d...], d...] * weight[target],
// ignore_index left out, reduced.
OnnxValue nll(Node& n, const OnnxValue& input, const OnnxValue& target,
              std::optional<OnnxValue> weight, std::optional<int64_t> ignore,
              const std::string& reduction) {
  const Shape is = n.meta(input).shape, ts = n.meta(target).shape;
  if (is.rank() < 2) n.refuse("the input must be [N, C, ...]");
  bool fits = ts.rank() == is.rank() - 1 && ts[0] == is[0];
  for (int a = 1; fits && a < ts.rank(); ++a) fits = ts[a] == is[a + 1];
  if (!fits) {
    n.refuse(str_cat("the target ", ts.to_string(), " must be the input ", is.to_string(),
                     " without its class axis"));
  }
  OnnxValue t = cast(n, target, DType::kInt64);
  std::optional<OnnxValue> keep;
  if (ignore) {
    keep = n.op(kernels::ne_op(), {}, {t, n.scalar(double(*ignore), DType::kInt64)});
    t = n.op(kernels::where_op(), {}, {*keep, t, n.scalar(0, DType::kInt64)});
  }
  Ints td = dims_of(n.meta(t).shape);
  Ints with_class = td;
  with_class.insert(with_class.begin() + 1, 1);
  const OnnxValue picked = reshape(
      n, n.op(kernels::gather_op(), {{"axis", int64_t{1}}}, {input, reshape(n, t, with_class)}),
      td);
  OnnxValue loss = ew1<ew::Neg>(n, picked);
  const DType dtype = n.meta(input).dtype;
  std::optional<OnnxValue> w;
  if (weight) w = n.op(kernels::take_op(), {{"axis", int64_t{0}}}, {*weight, t});
  if (keep) {
    const OnnxValue k = cast(n, *keep, dtype);
    w = w ? ew2<ew::Mul>(n, *w, k) : k;
  }
  if (w) loss = ew2<ew::Mul>(n, loss, *w);
  if (reduction == "none") return loss;
  const Attrs all{{"axes", all_axes(int64_t(td.size()))}, {"keepdims", false}};
  const OnnxValue total = n.op(kernels::sum_op(), all, {loss});
  if (reduction == "sum") return total;
  if (reduction != "mean") n.refuse(str_cat("reduction '", reduction, "'"));
  if (!w) return n.op(kernels::mean_op(), all, {loss});
  return ew2<ew::Div>(n, total, n.op(kernels::sum_op(), all, {*w}));
}

std::optional<int64_t> ignore_index(Node& n) {
  if (!n.attr("ignore_index")) return std::nullopt;
  return n.attr_int("ignore_index", 0);
}

void convert_nll(Node& n) {
  n.set_output(0, nll(n, n.input(0), n.input(1), optional_input(n, 2), ignore_index(n),
                      n.attr_string("reduction", "mean")));
}

void convert_softmax_cross_entropy(Node& n) {
  const OnnxValue log_probs = n.op(kernels::log_softmax_op(), {{"axis", int64_t{1}}}, {n.input(0)});
  n.set_output(0, nll(n, log_probs, n.input(1), optional_input(n, 2), ignore_index(n),
                      n.attr_string("reduction", "mean")));
  n.set_output(1, log_probs);
}

// RNN, LSTM and GRU: per direction, the input projection as one linear op,
// then Tandem's recurrence op, whose gates are in torch's order (ONNX's are
// i, o, f, c for LSTM and z, r, h for GRU: the weights' blocks are taken in
// torch's order). Sequences [seq, batch, features] (layout 0) or
// [batch, seq, features] (layout 1).
// The GRU of ONNX's default (linear_before_reset = 0), which no Tandem op
// runs: n_t = tanh(P_n + (r_t * h_(t-1)) W_n^T + b_n), unrolled over the
// sequence. `projected` [batch, seq, 3 * hidden] and the recurrent weight
// and bias have their gates in torch's order (r, z, n). Returns every h_t
// [batch, seq, hidden] and the last [batch, hidden].
std::pair<OnnxValue, OnnxValue> gru_resetting_before_product(Node& n, const OnnxValue& projected,
                                                             const OnnxValue& weight_hh,
                                                             const OnnxValue& bias_hh,
                                                             std::optional<OnnxValue> h0,
                                                             bool reverse, int64_t hidden) {
  const Shape ps = n.meta(projected).shape;
  const int64_t batch = ps[0], steps = ps[1];
  check_unrolled_steps(n, steps, "linear_before_reset = 0");
  const OnnxValue w_rz = sliced(n, weight_hh, 0, 0, 2 * hidden),
                  w_n = sliced(n, weight_hh, 0, 2 * hidden, 3 * hidden);
  const OnnxValue b_rz = sliced(n, bias_hh, 0, 0, 2 * hidden),
                  b_n = sliced(n, bias_hh, 0, 2 * hidden, 3 * hidden);
  OnnxValue h =
      h0 ? *h0
         : n.op(
               kernels::full_op(),
               {{"shape", Ints{batch, hidden}}, {"dtype", n.meta(projected).dtype}, {"value", 0.0}},
               {});
  std::vector<OnnxValue> outputs(static_cast<size_t>(steps));
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t t = reverse ? steps - 1 - s : s;
    const OnnxValue p = reshape(n, sliced(n, projected, 1, t, t + 1), {batch, 3 * hidden});
    const OnnxValue rz =
        ew1<ew::Sigmoid>(n, ew2<ew::Add>(n, sliced(n, p, 1, 0, 2 * hidden),
                                         n.op(kernels::linear_op(), {}, {h, w_rz, b_rz})));
    const OnnxValue r = sliced(n, rz, 1, 0, hidden), z = sliced(n, rz, 1, hidden, 2 * hidden);
    const OnnxValue candidate = ew1<ew::Tanh>(
        n, ew2<ew::Add>(n, sliced(n, p, 1, 2 * hidden, 3 * hidden),
                        n.op(kernels::linear_op(), {}, {ew2<ew::Mul>(n, r, h), w_n, b_n})));
    // (1 - z) n + z h = n + z (h - n)
    h = ew2<ew::Add>(n, candidate, ew2<ew::Mul>(n, z, ew2<ew::Sub>(n, h, candidate)));
    outputs[size_t(t)] = reshape(n, h, {batch, 1, hidden});
  }
  const OnnxValue y =
      steps == 1 ? outputs[0] : n.op(kernels::concat_op(), {{"axis", int64_t{1}}}, outputs);
  return {y, h};
}

// An LSTM with peepholes, unrolled: each step's input, forget and output
// gates also see the cell (the previous one for input and forget, the new
// one for output) through the P weights, ONNX's [P_i, P_o, P_f]. The gates
// arrive in torch's order (i, f, g, o). Returns Y [batch, seq, hidden], the
// last h and the last c.
struct LstmRun {
  OnnxValue y, h, c;
};

LstmRun lstm_with_peepholes(Node& n, const OnnxValue& projected, const OnnxValue& weight_hh,
                            const OnnxValue& bias_hh, std::optional<OnnxValue> h0,
                            std::optional<OnnxValue> c0, const OnnxValue& peepholes, bool reverse,
                            int64_t hidden) {
  const Shape ps = n.meta(projected).shape;
  const int64_t batch = ps[0], steps = ps[1];
  check_unrolled_steps(n, steps, "peepholes");
  // Gate block `block` of hidden_size values along `axis`.
  auto part = [&](const OnnxValue& v, int64_t axis, int64_t block) {
    return sliced(n, v, axis, block * hidden, (block + 1) * hidden);
  };
  const OnnxValue p_i = part(peepholes, 0, 0), p_o = part(peepholes, 0, 1),
                  p_f = part(peepholes, 0, 2);
  auto zeros = [&] {
    return n.op(
        kernels::full_op(),
        {{"shape", Ints{batch, hidden}}, {"dtype", n.meta(projected).dtype}, {"value", 0.0}}, {});
  };
  OnnxValue h = h0 ? *h0 : zeros(), c = c0 ? *c0 : zeros();
  std::vector<OnnxValue> outputs(static_cast<size_t>(steps));
  for (int64_t k = 0; k < steps; ++k) {
    const int64_t t = reverse ? steps - 1 - k : k;
    const OnnxValue step = slice_at(n, projected, 1, t);
    const OnnxValue gates =
        ew2<ew::Add>(n, step, n.op(kernels::linear_op(), {}, {h, weight_hh, bias_hh}));
    auto peeped = [&](int64_t block, const OnnxValue& p, const OnnxValue& cell) {
      return ew1<ew::Sigmoid>(n, ew2<ew::Add>(n, part(gates, 1, block), ew2<ew::Mul>(n, p, cell)));
    };
    const OnnxValue i = peeped(0, p_i, c), f = peeped(1, p_f, c);
    const OnnxValue g = ew1<ew::Tanh>(n, part(gates, 1, 2));
    c = ew2<ew::Add>(n, ew2<ew::Mul>(n, f, c), ew2<ew::Mul>(n, i, g));
    const OnnxValue o = peeped(3, p_o, c);
    h = ew2<ew::Mul>(n, o, ew1<ew::Tanh>(n, c));
    outputs[size_t(t)] = reshape(n, h, {batch, 1, hidden});
  }
  const OnnxValue y =
      steps == 1 ? outputs[0] : n.op(kernels::concat_op(), {{"axis", int64_t{1}}}, outputs);
  return {y, h, c};
}

void convert_recurrent(Node& n, RecurrentKind kind) {
  const int64_t hidden = n.attr_int("hidden_size", 0);
  if (hidden < 1) n.refuse("hidden_size is required");
  check_host_count(n, hidden, "hidden_size");
  const std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    n.refuse(str_cat("direction '", direction, "'"));
  }
  const int64_t directions = direction == "bidirectional" ? 2 : 1;
  const bool batch_first = n.attr_int("layout", 0) != 0;
  if (n.attr("clip")) n.refuse("clip is not supported");
  // The ranks the indexing below relies on; the ops check the sizes.
  for (auto [i, rank] : {std::pair<size_t, int>{0, 3}, {1, 3}, {2, 3}, {3, 2}, {5, 3}, {6, 3}}) {
    if (n.has_input(i) && n.shape(i).rank() != rank) {
      n.refuse(str_cat("input ", i, " must have rank ", rank, ", not ", n.shape(i).rank()));
    }
    if (i > 0 && n.has_input(i) && n.shape(i)[0] != (direction == "bidirectional" ? 2 : 1)) {
      n.refuse(str_cat("input ", i, " must have one entry per direction"));
    }
  }
  if (n.attr_int("input_forget", 0) != 0) n.refuse("input_forget = 1 is not supported");
  // ONNX's default GRU resets before its recurrent product; torch's, and
  // Tandem's gru op, after it (linear_before_reset = 1).
  const bool unrolled_gru =
      kind == RecurrentKind::kGru && n.attr_int("linear_before_reset", 0) == 0;
  const kernels::OpDef* op = nullptr;
  Ints gate_order;  // ONNX's blocks in torch's order.
  std::vector<std::string> activations;
  switch (kind) {
    case RecurrentKind::kRnn:
      op = &kernels::rnn_tanh_op();
      gate_order = {0};
      activations = {"Tanh"};
      break;
    case RecurrentKind::kLstm:
      op = &kernels::lstm_op();
      gate_order = {0, 2, 3, 1};
      activations = {"Sigmoid", "Tanh", "Tanh"};
      break;
    case RecurrentKind::kGru:
      op = &kernels::gru_op();
      gate_order = {1, 0, 2};
      activations = {"Sigmoid", "Tanh"};
      break;
  }
  if (const onnx::AttributeProto* a = n.attr("activations")) {
    std::vector<std::string> given(a->strings().begin(), a->strings().end());
    if (kind == RecurrentKind::kRnn && !given.empty() && given[0] == "Relu") {
      op = &kernels::rnn_relu_op();
      activations = {"Relu"};
    }
    for (size_t i = 0; i < given.size(); ++i) {
      if (given[i] != activations[i % activations.size()]) {
        n.refuse(str_cat("activation '", given[i], "' is not supported"));
      }
    }
  }
  if (n.has_input(4)) {
    const int64_t steps = n.shape(0)[batch_first ? 1 : 0];
    for (int64_t len : n.known_ints(4, "sequence_lens")) {
      if (len != steps) n.refuse("sequences of different lengths are not supported");
    }
  }
  const bool peepholes = kind == RecurrentKind::kLstm && n.has_input(7);
  if (peepholes && (n.shape(7).rank() != 2 || n.shape(7)[1] != 3 * hidden)) {
    n.refuse(str_cat("P must be [directions, ", 3 * hidden, "]"));
  }
  const int64_t gates = int64_t(gate_order.size());
  if (n.shape(1)[1] != gates * hidden || n.shape(2)[1] != gates * hidden ||
      (n.has_input(3) && n.shape(3)[1] != 2 * gates * hidden)) {
    n.refuse(str_cat("W, R and B must hold ", gates, " gates of hidden_size ", hidden));
  }
  OnnxValue x = n.input(0);
  if (!batch_first) x = n.op(kernels::transpose_op(), {{"perm", Ints{1, 0, 2}}}, {x});
  const Shape xs = n.meta(x).shape;  // [batch, seq, features]
  const int64_t batch = xs[0], steps = xs[1];
  // Rows of [gates * hidden, ...] weights in torch's gate order.
  Ints rows;
  for (int64_t g : gate_order) {
    for (int64_t h = 0; h < hidden; ++h) rows.push_back(g * hidden + h);
  }
  const OnnxValue order = n.constant(Tensor::from_vector<int64_t>(rows, Shape{gates * hidden}));
  auto direction_slice = [&](const OnnxValue& v, int64_t d) {
    const Shape s = n.meta(v).shape;
    Ints rest(s.begin() + 1, s.end());
    return reshape(
        n,
        n.op(kernels::slice_op(),
             {{"axis", int64_t{0}}, {"begin", d}, {"end", d + 1}, {"step", int64_t{1}}}, {v}),
        rest);
  };
  auto reordered = [&](const OnnxValue& v) {
    return n.op(kernels::take_op(), {{"axis", int64_t{0}}}, {v, order});
  };
  std::vector<OnnxValue> ys, hs, cs;
  for (int64_t d = 0; d < directions; ++d) {
    const OnnxValue w = reordered(direction_slice(n.input(1), d));
    const OnnxValue r = reordered(direction_slice(n.input(2), d));
    OnnxValue bias_ih, bias_hh;
    if (n.has_input(3)) {
      const OnnxValue b = direction_slice(n.input(3), d);
      auto half = [&](int64_t k) {
        return reordered(n.op(kernels::slice_op(),
                              {{"axis", int64_t{0}},
                               {"begin", k * gates * hidden},
                               {"end", (k + 1) * gates * hidden},
                               {"step", int64_t{1}}},
                              {b}));
      };
      bias_ih = half(0);
      bias_hh = half(1);
    } else {
      bias_ih = bias_hh =
          n.op(kernels::full_op(),
               {{"shape", Ints{gates * hidden}}, {"dtype", n.dtype(0)}, {"value", 0.0}}, {});
    }
    const OnnxValue projected = n.op(kernels::linear_op(), {}, {x, w, bias_ih});
    std::vector<OnnxValue> inputs = {projected, r, bias_hh};
    Attrs attrs{{"reverse", direction == "reverse" || d == 1}};
    auto initial = [&](size_t input, const char* name) {
      if (!n.has_input(input)) return;
      OnnxValue s = direction_slice(n.input(input), d);  // [batch, hidden]
      inputs.push_back(s);
      attrs.set(name, true);
    };
    initial(5, "initial_h");
    if (kind == RecurrentKind::kLstm) initial(6, "initial_c");
    if (unrolled_gru) {
      std::optional<OnnxValue> h0;
      if (n.has_input(5)) h0 = inputs.back();
      auto [y, h] = gru_resetting_before_product(n, projected, r, bias_hh, h0,
                                                 direction == "reverse" || d == 1, hidden);
      ys.push_back(y);
      hs.push_back(reshape(n, h, {1, batch, hidden}));
      continue;
    }
    if (peepholes) {
      std::optional<OnnxValue> h0, c0;
      if (n.has_input(5)) h0 = direction_slice(n.input(5), d);
      if (n.has_input(6)) c0 = direction_slice(n.input(6), d);
      const LstmRun run =
          lstm_with_peepholes(n, projected, r, bias_hh, h0, c0, direction_slice(n.input(7), d),
                              direction == "reverse" || d == 1, hidden);
      ys.push_back(run.y);
      hs.push_back(reshape(n, run.h, {1, batch, hidden}));
      cs.push_back(reshape(n, run.c, {1, batch, hidden}));
      continue;
    }
    const std::vector<OnnxValue> out = n.ops(*op, attrs, inputs);
    ys.push_back(out[0]);  // [batch, seq, hidden]
    hs.push_back(reshape(n, out[1], {1, batch, hidden}));
    if (kind == RecurrentKind::kLstm) cs.push_back(reshape(n, out[2], {1, batch, hidden}));
  }
  auto joined = [&](const std::vector<OnnxValue>& parts, int64_t axis) {
    return parts.size() == 1 ? parts[0] : n.op(kernels::concat_op(), {{"axis", axis}}, parts);
  };
  // Y: [seq, directions, batch, hidden], or [batch, seq, directions, hidden].
  std::vector<OnnxValue> per_direction;
  for (const OnnxValue& y : ys) {
    per_direction.push_back(
        batch_first ? reshape(n, y, {batch, steps, 1, hidden})
                    : reshape(n, n.op(kernels::transpose_op(), {{"perm", Ints{1, 0, 2}}}, {y}),
                              {steps, 1, batch, hidden}));
  }
  n.set_output(0, joined(per_direction, batch_first ? 2 : 1));
  auto states = [&](const std::vector<OnnxValue>& parts) {
    const OnnxValue s = joined(parts, 0);  // [directions, batch, hidden]
    return batch_first ? n.op(kernels::transpose_op(), {{"perm", Ints{1, 0, 2}}}, {s}) : s;
  };
  n.set_output(1, states(hs));
  if (kind == RecurrentKind::kLstm) n.set_output(2, states(cs));
}

// ---------------------------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------------------------

const ConverterTable& converters() {
  static const ConverterTable* table = [] {
    auto* t = new ConverterTable{
        {"Abs", unary<ew::Abs>},
        {"Acos", unary<ew::Acos>},
        {"Acosh", unary<ew::Acosh>},
        {"Asin", unary<ew::Asin>},
        {"Asinh", unary<ew::Asinh>},
        {"Atan", unary<ew::Atan>},
        {"Atanh", unary<ew::Atanh>},
        {"Ceil", unary<ew::Ceil>},
        {"Cos", unary<ew::Cos>},
        {"Cosh", unary<ew::Cosh>},
        {"Erf", unary<ew::Erf>},
        {"Exp", unary<ew::Exp>},
        {"Floor", unary<ew::Floor>},
        {"HardSwish", unary<ew::Hardswish>},
        {"IsNaN", unary<ew::Isnan>},
        {"Log", unary<ew::Log>},
        {"Neg", unary<ew::Neg>},
        {"Not", unary<ew::LogicalNot>},
        {"Reciprocal", unary<ew::Reciprocal>},
        {"Relu", unary<ew::Relu>},
        {"Round", unary<ew::Round>},
        {"Sigmoid", unary<ew::Sigmoid>},
        {"Sign", unary<ew::Sign>},
        {"Sin", unary<ew::Sin>},
        {"Sinh", unary<ew::Sinh>},
        {"Softplus", unary<ew::Softplus>},
        {"Softsign", unary<ew::Softsign>},
        {"Sqrt", unary<ew::Sqrt>},
        {"Tan", unary<ew::Tan>},
        {"Tanh", unary<ew::Tanh>},
        {"Add", binary<ew::Add>},
        {"Sub", binary<ew::Sub>},
        {"Mul", binary<ew::Mul>},
        {"Div", binary<ew::Div>},
        {"Pow", convert_pow},
        {"Mod", convert_mod},
        {"BitShift", convert_bit_shift},
        {"Equal", [](Node& n) { comparison(n, kernels::eq_op()); }},
        {"Greater", [](Node& n) { comparison(n, kernels::gt_op()); }},
        {"GreaterOrEqual", [](Node& n) { comparison(n, kernels::ge_op()); }},
        {"Less", [](Node& n) { comparison(n, kernels::lt_op()); }},
        {"LessOrEqual", [](Node& n) { comparison(n, kernels::le_op()); }},
        {"And", [](Node& n) { convert_logical(n, 0); }},
        {"Or", [](Node& n) { convert_logical(n, 1); }},
        {"Xor", [](Node& n) { convert_logical(n, 2); }},
        {"Max", [](Node& n) { variadic<ew::Maximum>(n); }},
        {"Min", [](Node& n) { variadic<ew::Minimum>(n); }},
        {"Sum", [](Node& n) { variadic<ew::Add>(n); }},
        {"Mean", [](Node& n) { variadic<ew::Add>(n, true); }},
        {"Elu", convert_elu},
        {"Celu", convert_celu},
        {"LeakyRelu", convert_leaky_relu},
        {"Selu", convert_selu},
        {"HardSigmoid", convert_hard_sigmoid},
        {"ThresholdedRelu", convert_thresholded_relu},
        {"Shrink", convert_shrink},
        {"PRelu", convert_prelu},
        {"Clip", convert_clip},
        {"IsInf", convert_isinf},
        {"Identity", convert_identity},
        {"Constant", convert_constant},
        {"Shape", convert_shape},
        {"Size", convert_size},
        {"Cast", convert_cast},
        {"CastLike", convert_cast_like},
        {"Reshape", convert_reshape},
        {"Flatten", convert_flatten},
        {"Squeeze", convert_squeeze},
        {"Unsqueeze", convert_unsqueeze},
        {"Transpose", convert_transpose},
        {"Concat", convert_concat},
        {"Split", convert_split},
        {"Slice", convert_slice},
        {"Gather", convert_gather},
        {"GatherElements", convert_gather_elements},
        {"GatherND", convert_gather_nd},
        {"ScatterElements", convert_scatter_elements},
        {"Scatter", convert_scatter_elements},
        {"ScatterND", convert_scatter_nd},
        {"Expand", convert_expand},
        {"Tile", convert_tile},
        {"ConstantOfShape", convert_constant_of_shape},
        {"Range", convert_range},
        {"Where", convert_where},
        {"Trilu", convert_trilu},
        {"EyeLike", convert_eye_like},
        {"OneHot", convert_one_hot},
        {"DepthToSpace", convert_depth_to_space},
        {"SpaceToDepth", convert_space_to_depth},
        {"Dropout", convert_dropout},
        {"Pad", convert_pad},
        {"ReduceSum", [](Node& n) { convert_reduce(n, Reduce::kSum); }},
        {"ReduceMean", [](Node& n) { convert_reduce(n, Reduce::kMean); }},
        {"ReduceMax", [](Node& n) { convert_reduce(n, Reduce::kMax); }},
        {"ReduceMin", [](Node& n) { convert_reduce(n, Reduce::kMin); }},
        {"ReduceProd", [](Node& n) { convert_reduce(n, Reduce::kProd); }},
        {"ReduceL1", [](Node& n) { convert_reduce(n, Reduce::kL1); }},
        {"ReduceL2", [](Node& n) { convert_reduce(n, Reduce::kL2); }},
        {"ReduceSumSquare", [](Node& n) { convert_reduce(n, Reduce::kSumSquare); }},
        {"ReduceLogSum", [](Node& n) { convert_reduce(n, Reduce::kLogSum); }},
        {"ReduceLogSumExp", [](Node& n) { convert_reduce(n, Reduce::kLogSumExp); }},
        {"ArgMax", [](Node& n) { convert_arg(n, true); }},
        {"ArgMin", [](Node& n) { convert_arg(n, false); }},
        {"MatMul", convert_matmul},
        {"Gemm", convert_gemm},
        {"Conv", convert_conv},
        {"ConvTranspose", convert_conv_transpose},
        {"MaxPool", [](Node& n) { convert_pool(n, true); }},
        {"AveragePool", [](Node& n) { convert_pool(n, false); }},
        {"GlobalMaxPool", [](Node& n) { convert_global_pool(n, true); }},
        {"GlobalAveragePool", [](Node& n) { convert_global_pool(n, false); }},
        {"BatchNormalization", convert_batch_norm},
        {"InstanceNormalization", convert_instance_norm},
        {"LayerNormalization", convert_layer_norm},
        {"MeanVarianceNormalization", convert_mean_variance_norm},
        {"LRN", convert_lrn},
        {"Softmax", [](Node& n) { convert_softmax(n, 0); }},
        {"LogSoftmax", [](Node& n) { convert_softmax(n, 1); }},
        {"Hardmax", [](Node& n) { convert_softmax(n, 2); }},
        {"CumSum", convert_cumsum},
        {"TopK", convert_topk},
        {"NegativeLogLikelihoodLoss", convert_nll},
        {"SoftmaxCrossEntropyLoss", convert_softmax_cross_entropy},
        {"Resize", convert_resize},
        {"Upsample", convert_upsample},
        {"RNN", [](Node& n) { convert_recurrent(n, RecurrentKind::kRnn); }},
        {"LSTM", [](Node& n) { convert_recurrent(n, RecurrentKind::kLstm); }},
        {"GRU", [](Node& n) { convert_recurrent(n, RecurrentKind::kGru); }},
    };
    add_quantized_converters(*t);
    add_signal_converters(*t);
    add_einsum_converter(*t);
    add_grid_sample_converter(*t);
    add_index_converters(*t);
    add_tfidf_converter(*t);
    add_control_flow_converters(*t);
    add_sequence_converters(*t);
    add_det_converter(*t);
    add_roi_align_converter(*t);
    return t;
  }();
  return *table;
}

}  // namespace
}  // namespace tandem::serialization::onnx_convert

namespace tandem::serialization {

OnnxConverter find_onnx_converter(std::string_view op_type) {
  auto it = onnx_convert::converters().find(op_type);
  return it == onnx_convert::converters().end() ? nullptr : it->second;
}

OnnxConverter find_onnx_training_converter(std::string_view op_type) {
  static const onnx_convert::ConverterTable* table = [] {
    auto* t = new onnx_convert::ConverterTable;
    onnx_convert::add_training_converters(*t);
    return t;
  }();
  auto it = table->find(op_type);
  return it == table->end() ? nullptr : it->second;
}

}  // namespace tandem::serialization
