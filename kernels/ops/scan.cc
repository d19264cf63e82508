// Running sums and products along an axis: cumsum and cumprod (torch.cumsum,
// ONNX CumSum), each with ONNX's "exclusive" (out[i] leaves x[i] out) and
// "reverse" (run from the end), and cumprod_backward, cumprod's exact
// gradient. Floating inputs accumulate in double, integers in int64
// (wrapping, Note [Integer arithmetic] in kernels/integer_math.h), as the
// reductions do.
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/integer_math.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// x seen as [outer, length, inner] around the scanned axis; element t of
// line (o, i), counted in the direction of the scan, is at at(o, i, t).
struct ScanLines {
  int64_t outer = 1, length = 1, inner = 1;
  bool reverse = false;

  explicit ScanLines(const Shape& shape, const Attrs& attrs) : reverse(attrs.get_bool("reverse")) {
    int axis = shape.normalize_axis(attrs.get_int("axis"));
    length = shape[axis];
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  }
  int64_t at(int64_t o, int64_t i, int64_t t) const {
    return (o * length + (reverse ? length - 1 - t : t)) * inner + i;
  }
  template <class Line>
  void for_each_line(Line line) const {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) line(o, i);
    }
  }
};

TensorMetas infer_scan(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(in[0].shape.rank() > 0, "cannot scan a scalar (rank 0); reshape it to [1]");
  in[0].shape.normalize_axis(attrs.get_int("axis"));
  TANDEM_CHECK(in[0].dtype != DType::kBool && in[0].dtype != DType::kFloat16 &&
                   in[0].dtype != DType::kBFloat16,
               "running sums and products of ", dtype_name(in[0].dtype),
               " are not supported; cast to ", in[0].dtype == DType::kBool ? "int64" : "float32");
  return {in[0]};
}

template <class T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

struct Sum {
  static constexpr int kIdentity = 0;
  template <class A>
  static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return a + b;
    } else {
      return integer::add(a, b);
    }
  }
};

struct Product {
  static constexpr int kIdentity = 1;
  template <class A>
  static A combine(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return a * b;
    } else {
      return integer::mul(a, b);
    }
  }
};

template <class Op>
void scan_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const ScanLines lines(x.shape(), c.attrs);
  const bool exclusive = c.attrs.get_bool("exclusive");
  visit_numeric(x.dtype(), [&]<class T>() {
    using A = Accumulator<T>;
    const T* in = x.data<T>();
    T* out = c.outputs[0].data<T>();
    lines.for_each_line([&](int64_t o, int64_t i) {
      A acc = Op::kIdentity;
      for (int64_t t = 0; t < lines.length; ++t) {
        const int64_t at = lines.at(o, i, t);
        const A value = static_cast<A>(in[at]);
        if (exclusive) out[at] = static_cast<T>(acc);
        acc = Op::combine(acc, value);
        if (!exclusive) out[at] = static_cast<T>(acc);
      }
    });
  });
}

// A running sum's adjoint is the running sum the other way.
std::vector<Tensor> cumsum_gradient(const GradContext& c) {
  Attrs attrs = c.attrs;
  attrs.set("reverse", !c.attrs.get_bool("reverse"));
  return {nested_call1("cumsum", {c.grad_outputs[0]}, attrs)};
}

std::vector<Tensor> cumprod_gradient(const GradContext& c) {
  return {nested_call1("cumprod_backward", {c.inputs[0], c.grad_outputs[0]}, c.attrs)};
}

TensorMetas infer_cumprod_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("x", in[0].dtype);
  TANDEM_CHECK(in[1].shape == in[0].shape && in[1].dtype == in[0].dtype, "the gradient (",
               dtype_name(in[1].dtype), in[1].shape.to_string(), ") must match x (",
               dtype_name(in[0].dtype), in[0].shape.to_string(), ")");
  return infer_scan(in.subspan(0, 1), attrs);
}

// Note [Cumulative product gradient]: dividing the gradient by x fails at a
// zero. Without division, in the scan's direction, with P_t the product of
// x before t:
//   inclusive (y_j = x_0 ... x_j):  dx_t = P_t * R_t, R_t = g_t + x_{t+1} R_{t+1}
//   exclusive (y_j = x_0 ... x_{j-1}): dx_t = P_t * S_t, S_t = g_{t+1} + x_{t+1} S_{t+1}
// (R and S end at g_{n-1} and 0): one pass back for R or S, one forward for
// P, exact with any number of zeros.
void cumprod_backward_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const ScanLines lines(x.shape(), c.attrs);
  const bool exclusive = c.attrs.get_bool("exclusive");
  visit_floating(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    const T* g = c.inputs[1].data<T>();
    T* dx = c.outputs[0].data<T>();
    std::vector<double> after(lines.length);  // R or S.
    lines.for_each_line([&](int64_t o, int64_t i) {
      const int64_t n = lines.length;
      if (n == 0) return;
      double next = 0;  // R_{t+1} or S_{t+1}, with x_{t+1} and g_{t+1}.
      for (int64_t t = n - 1; t >= 0; --t) {
        const double x_next = t + 1 < n ? in[lines.at(o, i, t + 1)] : 0.0;
        const double g_next = t + 1 < n ? g[lines.at(o, i, t + 1)] : 0.0;
        after[t] = exclusive ? g_next + x_next * next : g[lines.at(o, i, t)] + x_next * next;
        next = after[t];
      }
      double before = 1;  // P_t.
      for (int64_t t = 0; t < n; ++t) {
        const int64_t at = lines.at(o, i, t);
        dx[at] = static_cast<T>(before * after[t]);
        before *= in[at];
      }
    });
  });
}

std::vector<AttrSpec> scan_attrs() {
  return {{"axis", int64_t{0}}, {"exclusive", false}, {"reverse", false}};
}

}  // namespace

const OpDef& cumprod_op() { return op_def<"cumprod">(); }
const OpDef& cumsum_op() { return op_def<"cumsum">(); }

void register_scan_ops(Registry& registry) {
  registry.add(
      {.name = "cumsum",
       .attrs = scan_attrs(),
       .infer = infer_scan,
       .cpu = scan_kernel<Sum>,
       .gradient = cumsum_gradient,
       .doc = "running sum along an axis (exclusive: x[i] left out; reverse: from the end)"});
  registry.add({.name = "cumprod",
                .attrs = scan_attrs(),
                .infer = infer_scan,
                .cpu = scan_kernel<Product>,
                .gradient = cumprod_gradient,
                .doc = "running product along an axis (exclusive, reverse as for cumsum)"});
  registry.add({.name = "cumprod_backward",
                .num_inputs = 2,
                .attrs = scan_attrs(),
                .infer = infer_cumprod_backward,
                .cpu = cumprod_backward_kernel,
                .differentiable = false,
                .doc = "cumprod's gradient for x, given the output's gradient (exact at zeros)"});
}

}  // namespace tandem::kernels
