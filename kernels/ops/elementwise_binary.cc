// Elementwise binary ops with NumPy broadcasting: add, sub, mul, div, pow,
// maximum, minimum, and the comparisons eq, ne, lt, le, gt, ge (bool output,
// not differentiable). Both operands must have the same dtype: Tandem does
// not promote silently; cast first. Integer operands follow Note [Integer
// arithmetic] (kernels/integer_math.h): they wrap around, and a division by
// zero fails the op.
#include <algorithm>
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/parallel.h"
#include "kernels/elementwise_ops.h"
#include "kernels/integer_math.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

TensorMetas infer_binary(absl::Span<const TensorMeta> in, DType out_dtype) {
  TANDEM_CHECK(in[0].dtype == in[1].dtype, "dtype mismatch: ", dtype_name(in[0].dtype), " and ",
               dtype_name(in[1].dtype), " (shapes ", in[0].shape.to_string(), " and ",
               in[1].shape.to_string(), "); cast one operand first");
  return {{broadcast_shapes(in[0].shape, in[1].shape), out_dtype}};
}

TensorMetas infer_arithmetic(absl::Span<const TensorMeta> in, const Attrs&) {
  TANDEM_CHECK(in[0].dtype != DType::kBool && in[0].dtype != DType::kFloat16 &&
                   in[0].dtype != DType::kBFloat16,
               "arithmetic on ", dtype_name(in[0].dtype), " is not supported; cast to float32");
  return infer_binary(in, in[0].dtype);
}

TensorMetas infer_comparison(absl::Span<const TensorMeta> in, const Attrs&) {
  return infer_binary(in, DType::kBool);
}

// out[i] = f(a[i * sa], b[i * sb]) for i < n. The strides are 1, or 0 for an
// operand broadcast along the row; each pattern gets its own loop so that it
// vectorizes. Outputs are fresh buffers (dispatch allocates them), so
// nothing aliases.
template <class In, class Out, class F>
void row_loop(const In* __restrict a, int64_t sa, const In* __restrict b, int64_t sb,
              Out* __restrict out, int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (sa == 1 && sb == 0) {
    In vb = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], vb);
  } else if (sa == 0 && sb == 1) {
    In va = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = f(va, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i * sa], b[i * sb]);
  }
}

// out[i] = f(a[i'], b[i'']) over the broadcast shape, split over the cores
// by parallel_for with `grain` (kernels/cpu/parallel.h).
template <class In, class Out, class F>
void broadcast_loop(const Tensor& a, const Tensor& b, const Tensor& out, int64_t grain, F f) {
  const In* pa = static_cast<const In*>(a.raw_data());
  const In* pb = static_cast<const In*>(b.raw_data());
  Out* po = static_cast<Out*>(out.raw_data());
  const Shape& shape = out.shape();
  int64_t n = shape.numel();
  if (n == 0) return;
  // An operand with all n elements is laid out like the output (broadcasting
  // only added axes of size 1); one with a single element is a scalar.
  // Either way the output is one flat row.
  if ((a.numel() == n || a.numel() == 1) && (b.numel() == n || b.numel() == 1)) {
    int64_t sa = a.numel() == n ? 1 : 0, sb = b.numel() == n ? 1 : 0;
    parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      row_loop(pa + begin * sa, sa, pb + begin * sb, sb, po + begin, end - begin, f);
    });
    return;
  }
  // Otherwise the rank is at least 2: the output is rows of its innermost
  // axis, and the chunks are whole rows.
  Strides sa = broadcast_strides(a.shape(), shape);
  Strides sb = broadcast_strides(b.shape(), shape);
  int rank = shape.rank();
  int64_t inner = shape[rank - 1];
  parallel_for(n / inner, std::max<int64_t>(1, grain / inner), [&](int64_t first, int64_t last) {
    // The multi-index of row `first` over axes rank-2 .. 0, and where each
    // operand's row starts.
    Strides index(rank, 0);
    int64_t offset_a = 0, offset_b = 0, rest = first;
    for (int axis = rank - 2; axis >= 0; --axis) {
      index[axis] = rest % shape[axis];
      rest /= shape[axis];
      offset_a += index[axis] * sa[axis];
      offset_b += index[axis] * sb[axis];
    }
    // Rows may be short ([N, 3] + [3]), so the step to the next row along
    // axis rank-2 is kept to plain increments; the carry into the outer axes
    // runs once per rows_2 rows.
    const int64_t inner_a = sa[rank - 1], inner_b = sb[rank - 1];
    const int64_t step_a = sa[rank - 2], step_b = sb[rank - 2], rows_2 = shape[rank - 2];
    int64_t row_2 = index[rank - 2];
    for (int64_t row = first; row < last; ++row) {
      row_loop(pa + offset_a, inner_a, pb + offset_b, inner_b, po + row * inner, inner, f);
      offset_a += step_a;
      offset_b += step_b;
      if (++row_2 < rows_2) continue;
      offset_a -= step_a * rows_2;
      offset_b -= step_b * rows_2;
      row_2 = 0;
      for (int axis = rank - 3; axis >= 0; --axis) {
        offset_a += sa[axis];
        offset_b += sb[axis];
        if (++index[axis] < shape[axis]) break;
        offset_a -= sa[axis] * shape[axis];
        offset_b -= sb[axis] * shape[axis];
        index[axis] = 0;
      }
    }
  });
}

template <class F>
void arithmetic_kernel(const KernelContext& c) {
  visit_numeric(c.inputs[0].dtype(), [&]<class T>() {
    broadcast_loop<T, T>(c.inputs[0], c.inputs[1], c.outputs[0], grain_for<F>(),
                         [](T x, T y) { return static_cast<T>(F{}(x, y)); });
  });
}

template <class F>
void comparison_kernel(const KernelContext& c) {
  visit_all(c.inputs[0].dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      broadcast_loop<T, bool>(c.inputs[0], c.inputs[1], c.outputs[0], kCheapGrain, [](T x, T y) {
        return F{}(static_cast<float>(x), static_cast<float>(y));
      });
    } else {
      broadcast_loop<T, bool>(c.inputs[0], c.inputs[1], c.outputs[0], kCheapGrain,
                              [](T x, T y) { return F{}(x, y); });
    }
  });
}

struct Add {
  template <class T>
  auto operator()(T x, T y) const {
    return elementwise::Add{}(x, y);
  }
};
struct Sub {
  template <class T>
  auto operator()(T x, T y) const {
    return elementwise::Sub{}(x, y);
  }
};
struct Mul {
  template <class T>
  auto operator()(T x, T y) const {
    return elementwise::Mul{}(x, y);
  }
};
// Integer division by zero fails the op (Note [Integer arithmetic]). The
// operands arrive as int64 so that a uint8 prints as a number.
[[noreturn]] void integer_division_by_zero(int64_t x) {
  TANDEM_CHECK(false, "integer division by zero (", x, " / 0)");
  __builtin_unreachable();
}
[[noreturn]] void zero_to_negative_power(int64_t y) {
  TANDEM_CHECK(false, "integer division by zero (0 raised to the negative power ", y, ")");
  __builtin_unreachable();
}

struct Div {
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (y == T{0}) [[unlikely]]
        integer_division_by_zero(x);
      return integer::div(x, y);
    } else {
      return elementwise::Div{}(x, y);
    }
  }
};
struct Pow {
  static constexpr int64_t kGrain = kCostlyGrain;
  template <class T>
  T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      if (integer::pow_divides_by_zero(x, y)) [[unlikely]]
        zero_to_negative_power(y);
      return integer::pow(x, y);
    } else {
      return elementwise::Pow{}(x, y);
    }
  }
};
struct Maximum {
  template <class T>
  T operator()(T x, T y) const {
    return elementwise::Maximum{}(x, y);
  }
};
struct Minimum {
  template <class T>
  T operator()(T x, T y) const {
    return elementwise::Minimum{}(x, y);
  }
};
struct Eq {
  template <class T>
  bool operator()(T x, T y) const {
    return x == y;
  }
};
struct Ne {
  template <class T>
  bool operator()(T x, T y) const {
    return x != y;
  }
};
struct Lt {
  template <class T>
  bool operator()(T x, T y) const {
    return x < y;
  }
};
struct Le {
  template <class T>
  bool operator()(T x, T y) const {
    return x <= y;
  }
};
struct Gt {
  template <class T>
  bool operator()(T x, T y) const {
    return x > y;
  }
};
struct Ge {
  template <class T>
  bool operator()(T x, T y) const {
    return x >= y;
  }
};

// Gradients. Each sums back over the axes an operand was broadcast along.

std::vector<Tensor> add_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {sum_to(g, c.inputs[0].shape()), sum_to(g, c.inputs[1].shape())};
}

std::vector<Tensor> sub_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {sum_to(g, c.inputs[0].shape()),
          sum_to(nested_call1(op_def<elementwise::Neg>(), {g}), c.inputs[1].shape())};
}

std::vector<Tensor> mul_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  return {sum_to(nested_call1("mul", {g, b}), a.shape()),
          sum_to(nested_call1("mul", {g, a}), b.shape())};
}

// d(a/b) = g/b, -g*a/b^2 = -(g/b) * (a/b).
std::vector<Tensor> div_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor g_over_b = nested_call1("div", {g, c.inputs[1]});
  return {sum_to(g_over_b, c.inputs[0].shape()),
          sum_to(nested_call1(op_def<elementwise::Neg>(),
                              {nested_call1("mul", {g_over_b, c.outputs[0]})}),
                 c.inputs[1].shape())};
}

// d(a^b) = g*b*a^(b-1), g*a^b*log(a).
std::vector<Tensor> pow_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor b_minus_one = nested_call1("sub", {b, scalar_tensor(1, b.dtype())});
  Tensor grad_a =
      nested_call1("mul", {g, nested_call1("mul", {b, nested_call1("pow", {a, b_minus_one})})});
  Tensor grad_b = nested_call1(
      "mul",
      {g, nested_call1("mul", {c.outputs[0], nested_call1(op_def<elementwise::Log>(), {a})})});
  return {sum_to(grad_a, a.shape()), sum_to(grad_b, b.shape())};
}

// The gradient goes to the operand that was selected (to `a` on ties).
template <const char* kSelectsA>
std::vector<Tensor> select_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor mask = nested_call1(cast_op(), {nested_call1(kSelectsA, {a, b})}, {{"dtype", g.dtype()}});
  Tensor grad_a = nested_call1("mul", {g, mask});
  return {sum_to(grad_a, a.shape()), sum_to(nested_call1("sub", {g, grad_a}), b.shape())};
}

constexpr char kGe[] = "ge";
constexpr char kLe[] = "le";

// Formula is the op's struct in kernels/elementwise_ops.h.
template <class Formula>
OpDef arithmetic(KernelFn kernel, GradientFn gradient, std::string doc) {
  static constexpr auto kInfos = elementwise::ElementwiseOps::infos();
  return {
      .name = std::string(Formula::kName),
      .num_inputs = 2,
      .infer = infer_arithmetic,
      .cpu = kernel,
      .gradient = gradient,
      .doc = std::move(doc),
      .elementwise = &kInfos[static_cast<size_t>(elementwise::ElementwiseOps::code_of<Formula>())]};
}

OpDef comparison(std::string name, KernelFn kernel, std::string doc) {
  return {.name = std::move(name),
          .num_inputs = 2,
          .infer = infer_comparison,
          .cpu = kernel,
          .differentiable = false,
          .doc = std::move(doc)};
}

}  // namespace

const OpDef& eq_op() { return op_def<"eq">(); }
const OpDef& ne_op() { return op_def<"ne">(); }
const OpDef& lt_op() { return op_def<"lt">(); }
const OpDef& le_op() { return op_def<"le">(); }
const OpDef& gt_op() { return op_def<"gt">(); }
const OpDef& ge_op() { return op_def<"ge">(); }

void register_elementwise_binary_ops(Registry& registry) {
  registry.add(arithmetic<elementwise::Add>(arithmetic_kernel<Add>, add_gradient, "a + b"));
  registry.add(arithmetic<elementwise::Sub>(arithmetic_kernel<Sub>, sub_gradient, "a - b"));
  registry.add(arithmetic<elementwise::Mul>(arithmetic_kernel<Mul>, mul_gradient, "a * b"));
  registry.add(
      arithmetic<elementwise::Div>(arithmetic_kernel<Div>, div_gradient,
                                   "a / b (integers: truncated; division by zero is an error)"));
  registry.add(arithmetic<elementwise::Pow>(arithmetic_kernel<Pow>, pow_gradient, "a ** b"));
  registry.add(arithmetic<elementwise::Maximum>(arithmetic_kernel<Maximum>, select_gradient<kGe>,
                                                "the larger of a and b (NaN if either is NaN)"));
  registry.add(arithmetic<elementwise::Minimum>(arithmetic_kernel<Minimum>, select_gradient<kLe>,
                                                "the smaller of a and b (NaN if either is NaN)"));
  registry.add(comparison("eq", comparison_kernel<Eq>, "a == b"));
  registry.add(comparison("ne", comparison_kernel<Ne>, "a != b"));
  registry.add(comparison("lt", comparison_kernel<Lt>, "a < b"));
  registry.add(comparison("le", comparison_kernel<Le>, "a <= b"));
  registry.add(comparison("gt", comparison_kernel<Gt>, "a > b"));
  registry.add(comparison("ge", comparison_kernel<Ge>, "a >= b"));
}

}  // namespace tandem::kernels
