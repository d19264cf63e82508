// pad, in torch's four modes, and pad_backward, the gradient of the three
// that read the input again. On an axis [a b c]:
//   constant   2 before:  v v a b c    (`value`)
//   reflect    2 before:  c b a b c    (mirrored about the edge, which is not repeated)
//   replicate  2 before:  a a a b c    (the edge repeated)
//   circular   2 before:  b c a b c    (the axis wrapped around)
// `pads` = [before_0, after_0, before_1, after_1, ...] lists every axis,
// outermost first (ONNX's pairs; torch's F.pad lists the last axis first).
// reflect needs each pad below the axis's size, as in torch; replicate and
// circular need a non-empty axis to read from, and circular wraps as often
// as the pad asks.
#include "kernels/padding.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/element_cast.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"
#include "kernels/scalar.h"

namespace tandem::kernels {

PadMode pad_mode(const Attrs& attrs) {
  const std::string& mode = attrs.get_string("mode");
  if (mode == "constant") return PadMode::kConstant;
  if (mode == "reflect") return PadMode::kReflect;
  if (mode == "replicate") return PadMode::kReplicate;
  if (mode == "circular") return PadMode::kCircular;
  TANDEM_CHECK(false, "unknown padding mode '", mode,
               "'; expected constant, reflect, replicate or circular");
  return PadMode::kConstant;  // Unreachable.
}

namespace {

using Ints = std::vector<int64_t>;

// The padded shape of `shape`, with pads and mode checked against it.
Shape padded_shape(const Shape& shape, const Ints& pads, PadMode mode) {
  TANDEM_CHECK(static_cast<int>(pads.size()) == 2 * shape.rank(), "pads ", ints_to_string(pads),
               " has ", pads.size(), " entries; a tensor of shape ", shape.to_string(), " needs ",
               2 * shape.rank(), " (before and after for each axis)");
  Shape::Dims dims(shape.begin(), shape.end());
  for (int i = 0; i < shape.rank(); ++i) {
    const int64_t before = pads[2 * i], after = pads[2 * i + 1];
    TANDEM_CHECK(before >= 0 && after >= 0, "pads ", ints_to_string(pads),
                 " has a negative entry at axis ", i);
    if (mode == PadMode::kReflect) {
      TANDEM_CHECK(before < shape[i] && after < shape[i], "reflect padding by ", before, " and ",
                   after, " on axis ", i, " of shape ", shape.to_string(),
                   " needs each pad below the axis's size ", shape[i]);
    } else if (mode != PadMode::kConstant && (before > 0 || after > 0)) {
      TANDEM_CHECK(shape[i] > 0, pad_mode_name(mode), " padding of axis ", i, " of shape ",
                   shape.to_string(), " has nothing to repeat: the axis is empty");
    }
    // The gradient slices [before, before + shape[i]), inside this sum.
    auto input = [&] { return shape.to_string(); };
    dims[i] = checked_add(
        checked_add(dims[i], before, "axis ", i, " of ", input, " padded by pads[", 2 * i, "]"),
        after, "axis ", i, " of ", input, " padded by pads[", 2 * i, "] and pads[", 2 * i + 1, "]");
  }
  return Shape(dims);
}

TensorMetas infer_pad(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  PadMode mode = pad_mode(attrs);
  Shape out = padded_shape(in[0].shape, attrs.get_ints("pads"), mode);
  // An integer fill must be a value of the dtype (a float one may round).
  if (mode == PadMode::kConstant) check_value_fits("value", attrs.get_float("value"), in[0].dtype);
  return {{out, in[0].dtype}};
}

// The input's rows (its last axis) copied to their place in the output,
// which holds `value` everywhere else.
void constant_pad(const Tensor& x, const Tensor& out, const Ints& pads, double value) {
  visit_all(x.dtype(), [&]<class T>() {
    T fill = convert<T>(value);  // Exact for integers: inference checked it.
    T* dst = out.data<T>();
    std::fill(dst, dst + out.numel(), fill);
    const Shape& shape = x.shape();
    int rank = shape.rank();
    if (x.numel() == 0) return;
    if (rank == 0) {
      *dst = *x.data<T>();
      return;
    }
    int64_t row = shape[rank - 1], rows = x.numel() / row;
    const T* src = x.data<T>();
    Strides index(rank, 0), out_strides(rank, 1);
    for (int i = rank - 2; i >= 0; --i) out_strides[i] = out_strides[i + 1] * out.shape()[i + 1];
    int64_t offset = 0;
    for (int i = 0; i < rank; ++i) offset += pads[2 * i] * out_strides[i];
    for (int64_t r = 0; r < rows; ++r) {
      std::copy(src + r * row, src + (r + 1) * row, dst + offset);
      for (int axis = rank - 2; axis >= 0; --axis) {
        offset += out_strides[axis];
        if (++index[axis] < shape[axis]) break;
        offset -= out_strides[axis] * shape[axis];
        index[axis] = 0;
      }
    }
  });
}

// For each axis of the padded shape, the offset in the (contiguous) input
// that each of its positions reads: the source position times the stride.
std::vector<Ints> source_offsets(const Shape& input, const Ints& pads, PadMode mode) {
  std::vector<Ints> tables(input.rank());
  for (int axis = 0; axis < input.rank(); ++axis) {
    const int64_t before = pads[2 * axis], size = input[axis];
    const int64_t length = size + before + pads[2 * axis + 1];
    for (int64_t o = 0; o < length; ++o) {
      tables[axis].push_back(pad_source(mode, o, before, size) * input.stride(axis));
    }
  }
  return tables;
}

// Calls visit(o, i) for each element o of the padded shape (row-major) and
// the input element i it reads.
template <class Visit>
void for_each_source(const Shape& input, const Shape& padded, const Ints& pads, PadMode mode,
                     Visit visit) {
  if (padded.numel() == 0) return;
  if (input.rank() == 0) return visit(0, 0);
  const std::vector<Ints> tables = source_offsets(input, pads, mode);
  const int rank = padded.rank();
  const int64_t row = padded[rank - 1];
  const Ints& last = tables[rank - 1];
  Strides index(rank, 0);
  int64_t base = 0;  // Sum of the outer axes' offsets.
  for (int axis = 0; axis + 1 < rank; ++axis) base += tables[axis][0];
  for (int64_t start = 0; start < padded.numel(); start += row) {
    for (int64_t k = 0; k < row; ++k) visit(start + k, base + last[k]);
    for (int axis = rank - 2; axis >= 0; --axis) {
      base -= tables[axis][index[axis]];
      if (++index[axis] < padded[axis]) {
        base += tables[axis][index[axis]];
        break;
      }
      index[axis] = 0;
      base += tables[axis][0];
    }
  }
}

void pad_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Ints& pads = c.attrs.get_ints("pads");
  const PadMode mode = pad_mode(c.attrs);
  if (mode == PadMode::kConstant) return constant_pad(x, out, pads, c.attrs.get_float("value"));
  visit_element_bits(dtype_size(x.dtype()), [&]<class U>() {
    const U* from = static_cast<const U*>(x.raw_data());
    U* to = static_cast<U*>(out.raw_data());
    for_each_source(x.shape(), out.shape(), pads, mode,
                    [&](int64_t o, int64_t i) { to[o] = from[i]; });
  });
}

Attrs pads_and_mode(const Attrs& attrs) {
  return {{"pads", attrs.get_ints("pads")}, {"mode", attrs.get_string("mode")}};
}

// Constant padding's gradient is the middle of g; the other modes add each
// padded position's gradient to the element it copied.
std::vector<Tensor> pad_gradient(const GradContext& c) {
  const Ints& pads = c.attrs.get_ints("pads");
  const Shape& shape = c.inputs[0].shape();
  Tensor g = c.grad_outputs[0];
  if (pad_mode(c.attrs) != PadMode::kConstant) {
    return {nested_call1("pad_backward", {g}, pads_and_mode(c.attrs))};
  }
  for (int i = 0; i < shape.rank(); ++i) {
    if (pads[2 * i] == 0 && pads[2 * i + 1] == 0) continue;
    g = nested_call1(
        slice_op(), {g},
        {{"axis", int64_t{i}}, {"begin", pads[2 * i]}, {"end", pads[2 * i] + shape[i]}});
  }
  return {g};
}

// pad_backward: the input's shape is g's less the pads.
TensorMetas infer_pad_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("the gradient", in[0].dtype);
  const Shape& g = in[0].shape;
  const Ints& pads = attrs.get_ints("pads");
  const PadMode mode = pad_mode(attrs);
  TANDEM_CHECK(mode != PadMode::kConstant,
               "pad_backward is for the reflect, replicate and circular modes");
  TANDEM_CHECK(static_cast<int>(pads.size()) == 2 * g.rank(), "pads ", ints_to_string(pads),
               " has ", pads.size(), " entries; a gradient of shape ", g.to_string(), " needs ",
               2 * g.rank());
  Shape::Dims dims(g.begin(), g.end());
  for (int i = 0; i < g.rank(); ++i) {
    TANDEM_CHECK(pads[2 * i] >= 0 && pads[2 * i + 1] >= 0 && pads[2 * i] <= g[i] - pads[2 * i + 1],
                 "pads ", ints_to_string(pads), " do not fit a gradient of shape ", g.to_string(),
                 " at axis ", i);
    dims[i] = g[i] - pads[2 * i] - pads[2 * i + 1];
  }
  Shape input(dims);
  TANDEM_CHECK(padded_shape(input, pads, mode) == g, "unreachable: pads are inconsistent");
  return {{input, in[0].dtype}};
}

void pad_backward_kernel(const KernelContext& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& dx = c.outputs[0];
  if (dx.nbytes() > 0) std::memset(dx.raw_data(), 0, dx.nbytes());
  visit_floating(g.dtype(), [&]<class T>() {
    const T* from = g.data<T>();
    T* to = dx.data<T>();
    for_each_source(dx.shape(), g.shape(), c.attrs.get_ints("pads"), pad_mode(c.attrs),
                    [&](int64_t o, int64_t i) { to[i] += from[o]; });
  });
}

// pad_backward sums what pad copies: its adjoint is pad again.
std::vector<Tensor> pad_backward_gradient(const GradContext& c) {
  return {nested_call1(pad_op(), {c.grad_outputs[0]}, pads_and_mode(c.attrs))};
}

}  // namespace

const OpDef& pad_op() { return op_def<"pad">(); }

void register_padding_ops(Registry& registry) {
  registry.add({.name = "pad",
                .attrs = {required("pads", Ints{}), optional("value", 0.0),
                          optional("mode", std::string("constant"))},
                .infer = infer_pad,
                .cpu = pad_kernel,
                .gradient = pad_gradient,
                .doc = "x padded by pads = [before_0, after_0, ...]: with value (constant), "
                       "mirrored (reflect), the edge (replicate) or wrapped (circular)"});
  registry.add({.name = "pad_backward",
                .attrs = {required("pads", Ints{}), required("mode", std::string())},
                .infer = infer_pad_backward,
                .cpu = pad_backward_kernel,
                .gradient = pad_backward_gradient,
                .doc = "the gradient of an edge-mode pad: each position's gradient added to the "
                       "element it copied"});
}

}  // namespace tandem::kernels
