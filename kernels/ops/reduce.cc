// Reductions over any set of axes: sum, mean, prod, max, min, var (attrs "axes",
// empty meaning all, and "keepdims"), and argmax over one axis. Floating
// inputs accumulate in double, integers in int64 (wrapping around, Note
// [Integer arithmetic] in kernels/integer_math.h), so a float32 sum of many
// small values keeps its precision.
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/container/inlined_vector.h"

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/elementwise_ops.h"
#include "kernels/integer_math.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// Axes of one shape, sorted: inline, so that a reduction allocates nothing
// to find them.
using Axes = absl::InlinedVector<int, 6>;

// The reduced axes of `shape`, normalized, sorted and unique; all axes when
// `axes` is empty.
Axes reduced_axes(const Shape& shape, const std::vector<int64_t>& axes) {
  Axes result;
  if (axes.empty()) {
    for (int i = 0; i < shape.rank(); ++i) result.push_back(i);
    return result;
  }
  for (int64_t axis : axes) {
    int normalized = shape.normalize_axis(axis);
    TANDEM_CHECK(std::find(result.begin(), result.end(), normalized) == result.end(), "axis ", axis,
                 " is listed twice");
    result.push_back(normalized);
  }
  std::sort(result.begin(), result.end());
  return result;
}

// The input's shape with reduced axes set to 1.
Shape keepdims_shape(const Shape& shape, const Axes& axes) {
  Shape::Dims dims(shape.begin(), shape.end());
  for (int axis : axes) dims[axis] = 1;
  return Shape(dims);
}

Shape reduced_shape(const Shape& shape, const Axes& axes, bool keepdims) {
  if (keepdims) return keepdims_shape(shape, axes);
  Shape::Dims dims;
  for (int i = 0; i < shape.rank(); ++i) {
    if (!std::binary_search(axes.begin(), axes.end(), i)) dims.push_back(shape[i]);
  }
  return Shape(dims);
}

TensorMetas infer_reduce(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  Axes axes = reduced_axes(in[0].shape, attrs.get_ints("axes"));
  return {{reduced_shape(in[0].shape, axes, attrs.get_bool("keepdims")), in[0].dtype}};
}

TensorMetas infer_floating_reduce(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("input", in[0].dtype);
  return infer_reduce(in, attrs);
}

TensorMetas infer_max_min(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  Axes axes = reduced_axes(in[0].shape, attrs.get_ints("axes"));
  for (int axis : axes) {
    TANDEM_CHECK(in[0].shape[axis] > 0, "cannot reduce over axis ", axis, " of size 0 in shape ",
                 in[0].shape.to_string(), ": max/min of nothing is undefined");
  }
  return infer_reduce(in, attrs);
}

// Calls visit(out_offset, in_offset) for every input element in row-major
// order, where out_offset indexes the keepdims-shaped output.
template <class Visit>
void for_each_element(const Shape& in_shape, const Shape& keep_shape, Visit visit) {
  int64_t n = in_shape.numel();
  if (n == 0) return;
  int rank = in_shape.rank();
  if (rank == 0) {
    visit(0, 0);
    return;
  }
  Strides out_strides = broadcast_strides(keep_shape, in_shape);
  int64_t inner = in_shape[rank - 1];
  int64_t inner_stride = out_strides[rank - 1];
  Strides index(rank, 0);
  int64_t out_offset = 0;
  for (int64_t start = 0; start < n; start += inner) {
    for (int64_t i = 0; i < inner; ++i) visit(out_offset + i * inner_stride, start + i);
    for (int axis = rank - 2; axis >= 0; --axis) {
      out_offset += out_strides[axis];
      if (++index[axis] < in_shape[axis]) break;
      out_offset -= out_strides[axis] * in_shape[axis];
      index[axis] = 0;
    }
  }
}

template <class T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
void accumulate(Accumulator<T>& acc, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    acc += value;
  } else {
    acc = integer::add(acc, static_cast<int64_t>(value));
  }
}

template <class T>
void multiply(Accumulator<T>& acc, T value) {
  if constexpr (std::is_floating_point_v<T>) {
    acc *= value;
  } else {
    acc = integer::mul(acc, static_cast<int64_t>(value));
  }
}

enum class Fold { kSum, kMean, kProd };

// Sum, mean (the sum divided by the count) and product, into an accumulator
// per output.
template <Fold kFold>
void fold_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  Axes axes = reduced_axes(x.shape(), c.attrs.get_ints("axes"));
  Shape keep = keepdims_shape(x.shape(), axes);
  visit_numeric(x.dtype(), [&]<class T>() {
    auto fold = [](Accumulator<T>& acc, T value) {
      if constexpr (kFold == Fold::kProd) {
        multiply(acc, value);
      } else {
        accumulate(acc, value);
      }
    };
    // One accumulator per output; a reduction of everything (a loss, a norm)
    // needs only one and no index arithmetic. Both fold in row-major order.
    absl::InlinedVector<Accumulator<T>, 1> acc(keep.numel(), kFold == Fold::kProd ? 1 : 0);
    const T* in = x.data<T>();
    if (acc.size() == 1) {
      for (int64_t i = 0; i < x.numel(); ++i) fold(acc[0], in[i]);
    } else {
      for_each_element(x.shape(), keep, [&](int64_t o, int64_t i) { fold(acc[o], in[i]); });
    }
    int64_t count = keep.numel() == 0 ? 0 : x.numel() / keep.numel();
    T* out = c.outputs[0].data<T>();
    for (size_t o = 0; o < acc.size(); ++o) {
      if constexpr (kFold == Fold::kMean) {
        out[o] = static_cast<T>(count == 0 ? std::numeric_limits<double>::quiet_NaN()
                                           : static_cast<double>(acc[o]) / count);
      } else {
        out[o] = static_cast<T>(acc[o]);
      }
    }
  });
}

template <bool kMax>
void max_min_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  Axes axes = reduced_axes(x.shape(), c.attrs.get_ints("axes"));
  Shape keep = keepdims_shape(x.shape(), axes);
  visit_numeric(x.dtype(), [&]<class T>() {
    T* out = c.outputs[0].data<T>();
    std::vector<bool> seen(keep.numel(), false);
    const T* in = x.data<T>();
    for_each_element(x.shape(), keep, [&](int64_t o, int64_t i) {
      T v = in[i];
      if (!seen[o]) {
        out[o] = v;
        seen[o] = true;
      } else if (out[o] == out[o] && (v != v || (kMax ? v > out[o] : v < out[o]))) {
        out[o] = v;  // NaN wins, as in NumPy.
      }
    });
  });
}

// Variance with `correction` (1: unbiased, as torch.var's default).
void var_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  Axes axes = reduced_axes(x.shape(), c.attrs.get_ints("axes"));
  Shape keep = keepdims_shape(x.shape(), axes);
  int64_t correction = c.attrs.get_int("correction");
  visit_floating(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    std::vector<double> mean(keep.numel(), 0), squares(keep.numel(), 0);
    int64_t count = keep.numel() == 0 ? 0 : x.numel() / keep.numel();
    for_each_element(x.shape(), keep, [&](int64_t o, int64_t i) { mean[o] += in[i]; });
    for (double& m : mean) m /= static_cast<double>(count);
    for_each_element(x.shape(), keep, [&](int64_t o, int64_t i) {
      double d = in[i] - mean[o];
      squares[o] += d * d;
    });
    T* out = c.outputs[0].data<T>();
    // In double: any int64 correction, even INT64_MIN, without overflow.
    double dof = static_cast<double>(count) - static_cast<double>(correction);
    for (size_t o = 0; o < squares.size(); ++o) {
      out[o] =
          static_cast<T>(dof > 0 ? squares[o] / dof : std::numeric_limits<double>::quiet_NaN());
    }
  });
}

TensorMetas infer_argmax(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const Shape& shape = in[0].shape;
  TANDEM_CHECK(shape.rank() > 0, "argmax needs at least one axis, got a scalar");
  int axis = shape.normalize_axis(attrs.get_int("axis"));
  TANDEM_CHECK(shape[axis] > 0, "argmax over axis ", axis, " of size 0 in shape ",
               shape.to_string());
  return {{reduced_shape(shape, {axis}, attrs.get_bool("keepdims")), DType::kInt64}};
}

// The first index of the largest value along the axis (NaN counts as largest).
void argmax_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  int64_t size = x.shape()[axis];
  int64_t inner = x.shape().stride(axis);
  if (x.numel() == 0) return;  // Another axis is empty; so is the output (and inner may be 0).
  int64_t outer = x.numel() / (size * inner);
  int64_t* out = c.outputs[0].data<int64_t>();
  visit_numeric(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const T* row = in + o * size * inner + i;
        int64_t best = 0;
        for (int64_t k = 1; k < size; ++k) {
          T v = row[k * inner], b = row[best * inner];
          if (b == b && (v != v || v > b)) best = k;
        }
        out[o * inner + i] = best;
      }
    }
  });
}

// The gradient of a reduction, broadcast back over the reduced axes.
Tensor expand_back(const Tensor& g, const Tensor& x, const Attrs& attrs) {
  Axes axes = reduced_axes(x.shape(), attrs.get_ints("axes"));
  Shape keep = keepdims_shape(x.shape(), axes);
  std::vector<int64_t> keep_dims(keep.begin(), keep.end());
  std::vector<int64_t> x_dims(x.shape().begin(), x.shape().end());
  Tensor kept = g.shape() == keep ? g : nested_call1(reshape_op(), {g}, {{"shape", keep_dims}});
  return nested_call1(expand_op(), {kept}, {{"shape", x_dims}});
}

std::vector<Tensor> sum_gradient(const GradContext& c) {
  return {expand_back(c.grad_outputs[0], c.inputs[0], c.attrs)};
}

std::vector<Tensor> mean_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  const int64_t count = x.numel() == 0 ? 1 : x.numel() / std::max<int64_t>(c.outputs[0].numel(), 1);
  return {nested_call1(op_def<elementwise::Div>(), {expand_back(c.grad_outputs[0], x, c.attrs),
                                                    size_scalar(count, x.dtype(), x.device())})};
}

// d prod / dx_i = the product of the others: along the reduced axes, moved
// last and merged into one, the exclusive running product from the front
// times the one from the back (exact where x has zeros, unlike prod / x).
std::vector<Tensor> prod_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  Axes axes = reduced_axes(x.shape(), c.attrs.get_ints("axes"));
  std::vector<int64_t> perm, moved_dims, lines_dims;
  int64_t reduced = 1;
  for (int i = 0; i < x.rank(); ++i) {
    if (std::binary_search(axes.begin(), axes.end(), i)) continue;
    perm.push_back(i);
    lines_dims.push_back(x.shape()[i]);
  }
  for (int axis : axes) {
    perm.push_back(axis);
    reduced *= x.shape()[axis];
  }
  for (int64_t axis : perm) moved_dims.push_back(x.shape()[static_cast<int>(axis)]);
  lines_dims.push_back(reduced);
  bool identity = std::is_sorted(perm.begin(), perm.end());
  Tensor moved = identity ? x : nested_call1(transpose_op(), {x}, {{"perm", perm}});
  Tensor lines = nested_call1(reshape_op(), {moved}, {{"shape", lines_dims}});
  Attrs scan{{"axis", int64_t{-1}}, {"exclusive", true}};
  Tensor front = nested_call1(cumprod_op(), {lines}, scan);
  scan.set("reverse", true);
  Tensor back = nested_call1(cumprod_op(), {lines}, scan);
  Tensor others = nested_call1(op_def<elementwise::Mul>(), {front, back});
  std::vector<int64_t> kept_dims(lines_dims.begin(), lines_dims.end() - 1);
  kept_dims.push_back(1);
  Tensor g = nested_call1(expand_op(),
                          {nested_call1(reshape_op(), {c.grad_outputs[0]}, {{"shape", kept_dims}})},
                          {{"shape", lines_dims}});
  Tensor dx = nested_call1(reshape_op(), {nested_call1(op_def<elementwise::Mul>(), {others, g})},
                           {{"shape", moved_dims}});
  if (identity) return {dx};
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return {nested_call1(transpose_op(), {dx}, {{"perm", inverse}})};
}

// Ties share the gradient equally.
std::vector<Tensor> max_min_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  Tensor selected =
      nested_call1(cast_op(), {nested_call1(eq_op(), {x, expand_back(c.outputs[0], x, c.attrs)})},
                   {{"dtype", x.dtype()}});
  Attrs keep = c.attrs;
  keep.set("keepdims", true);
  Tensor ties = nested_call1(sum_op(), {selected}, keep);
  Tensor share = nested_call1(
      op_def<elementwise::Div>(),
      {selected,
       nested_call1(expand_op(), {ties},
                    {{"shape", std::vector<int64_t>(x.shape().begin(), x.shape().end())}})});
  return {nested_call1(op_def<elementwise::Mul>(),
                       {expand_back(c.grad_outputs[0], x, c.attrs), share})};
}

// d var / dx = 2 (x - mean) / (N - correction).
std::vector<Tensor> var_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  Attrs keep{{"axes", c.attrs.get_ints("axes")}, {"keepdims", true}};
  Tensor mean = nested_call1(mean_op(), {x}, keep);
  std::vector<int64_t> x_dims(x.shape().begin(), x.shape().end());
  Tensor centered = nested_call1(op_def<elementwise::Sub>(),
                                 {x, nested_call1(expand_op(), {mean}, {{"shape", x_dims}})});
  const int64_t count = x.numel() / std::max<int64_t>(c.outputs[0].numel(), 1);
  const Tensor twice =
      nested_call1(op_def<elementwise::Mul>(), {centered, scalar_tensor(2, x.dtype())});
  const Tensor divisor = size_scalar(count - c.attrs.get_int("correction"), x.dtype(), x.device());
  return {nested_call1(op_def<elementwise::Mul>(),
                       {expand_back(c.grad_outputs[0], x, c.attrs),
                        nested_call1(op_def<elementwise::Div>(), {twice, divisor})})};
}

std::vector<AttrSpec> reduce_attrs() {
  return {{"axes", std::vector<int64_t>{}}, {"keepdims", false}};
}

}  // namespace

const OpDef& sum_op() { return op_def<"sum">(); }
const OpDef& max_op() { return op_def<"max">(); }
const OpDef& min_op() { return op_def<"min">(); }
const OpDef& prod_op() { return op_def<"prod">(); }
const OpDef& argmax_op() { return op_def<"argmax">(); }
const OpDef& mean_op() { return op_def<"mean">(); }

void register_reduce_ops(Registry& registry) {
  registry.add({.name = "sum",
                .attrs = reduce_attrs(),
                .infer = infer_reduce,
                .cpu = fold_kernel<Fold::kSum>,
                .gradient = sum_gradient,
                .doc = "sum over axes (all when empty)"});
  registry.add({.name = "mean",
                .attrs = reduce_attrs(),
                .infer = infer_floating_reduce,
                .cpu = fold_kernel<Fold::kMean>,
                .gradient = mean_gradient,
                .doc = "mean over axes (all when empty)"});
  registry.add({.name = "prod",
                .attrs = reduce_attrs(),
                .infer = infer_reduce,
                .cpu = fold_kernel<Fold::kProd>,
                .gradient = prod_gradient,
                .doc = "product over axes (all when empty)"});
  registry.add({.name = "max",
                .attrs = reduce_attrs(),
                .infer = infer_max_min,
                .cpu = max_min_kernel<true>,
                .gradient = max_min_gradient,
                .doc = "largest value over axes; ties share the gradient"});
  registry.add({.name = "min",
                .attrs = reduce_attrs(),
                .infer = infer_max_min,
                .cpu = max_min_kernel<false>,
                .gradient = max_min_gradient,
                .doc = "smallest value over axes; ties share the gradient"});
  std::vector<AttrSpec> var_attrs = reduce_attrs();
  var_attrs.push_back({"correction", int64_t{1}});
  registry.add({.name = "var",
                .attrs = var_attrs,
                .infer = infer_floating_reduce,
                .cpu = var_kernel,
                .gradient = var_gradient,
                .doc = "variance over axes with Bessel's correction (default 1)"});
  registry.add({.name = "argmax",
                .attrs = {{"axis", int64_t{-1}}, {"keepdims", false}},
                .infer = infer_argmax,
                .cpu = argmax_kernel,
                .differentiable = false,
                .doc = "index of the largest value along one axis (int64)"});
}

}  // namespace tandem::kernels
