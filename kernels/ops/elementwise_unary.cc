// Elementwise unary ops: neg, abs, sign, square, exp, log, sqrt, rsqrt, tanh,
// sigmoid, erf, relu, leaky_relu, gelu (exact, erf-based), clip; plus cast
// (any dtype to any dtype) and where (a ternary select with broadcasting).
//
// Element types: the transcendental ops take float32 and float64 only; neg,
// abs, sign, square, relu and clip also take int32 and int64; where selects
// between operands of any dtype. Outputs keep the input's dtype (cast aside).
// cast converts each element by Note [Cast semantics] in kernels/element_cast.h:
// on the CPU a NaN, infinite or out-of-range value cast to an integer dtype
// fails the op; on a GPU it saturates (NaN gives 0).
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/elementwise_math.h"
#include "kernels/cpu/parallel.h"
#include "kernels/element_cast.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// Inference.

TensorMetas infer_floating(absl::Span<const TensorMeta> in, const Attrs&) {
  check_floating("input", in[0].dtype);
  return {in[0]};
}

bool is_signed_numeric(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt32 ||
         dtype == DType::kInt64;
}

TensorMetas infer_signed_numeric(absl::Span<const TensorMeta> in, const Attrs&) {
  TANDEM_CHECK(is_signed_numeric(in[0].dtype),
               "input must be float32, float64, int32 or int64, got ", dtype_name(in[0].dtype));
  return {in[0]};
}

TensorMetas infer_clip(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  double lo = attrs.get_float("min"), hi = attrs.get_float("max");
  TANDEM_CHECK(lo <= hi, "min must not exceed max, got min=", lo, " and max=", hi);
  return infer_signed_numeric(in, attrs);
}

TensorMetas infer_cast(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  return {{in[0].shape, attrs.get_dtype("dtype")}};
}

TensorMetas infer_where(absl::Span<const TensorMeta> in, const Attrs&) {
  TANDEM_CHECK(in[0].dtype == DType::kBool, "condition must be bool, got ", dtype_name(in[0].dtype),
               " (shape ", in[0].shape.to_string(), "); compare first");
  TANDEM_CHECK(in[1].dtype == in[2].dtype, "dtype mismatch: ", dtype_name(in[1].dtype), " and ",
               dtype_name(in[2].dtype), " (shapes ", in[1].shape.to_string(), " and ",
               in[2].shape.to_string(), "); cast one operand first");
  Shape shape = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape);
  return {{shape, in[1].dtype}};
}

// Kernels. A functor is built from the op's attributes once per call and
// applied to every element: out[i] = f(in[i]). Functors that call libm
// declare a smaller grain (kCostlyGrain), so that they split over the cores
// at fewer elements.
struct NoAttrs {
  explicit NoAttrs(const Attrs&) {}
};
struct CostlyNoAttrs : NoAttrs {
  using NoAttrs::NoAttrs;
  static constexpr int64_t kGrain = kCostlyGrain;
};

// Outputs are fresh buffers (dispatch allocates them), so nothing aliases.
template <class F, class T>
void map_range(F f, const T* __restrict in, T* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

template <class F, class T>
void map_elements(const KernelContext& c) {
  F f(c.attrs);
  const T* in = c.inputs[0].data<T>();
  T* out = c.outputs[0].data<T>();
  parallel_for(c.outputs[0].numel(), grain_for<F>(), [&](int64_t begin, int64_t end) {
    map_range(f, in + begin, out + begin, end - begin);
  });
}

template <class F>
void floating_kernel(const KernelContext& c) {
  visit_floating(c.inputs[0].dtype(), [&]<class T>() { map_elements<F, T>(c); });
}

// float32, float64, int32, int64 (inference rejects uint8 before we get here).
template <class F>
void signed_numeric_kernel(const KernelContext& c) {
  visit_numeric(c.inputs[0].dtype(), [&]<class T>() {
    if constexpr (std::is_signed_v<T>) map_elements<F, T>(c);
  });
}

struct Neg : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::neg(x);
  }
};
struct Abs : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::abs(x);
  }
};
struct Sign : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::sign(x);
  }
};
struct Square : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::square(x);
  }
};
struct Relu : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::relu(x);
  }
};
struct Exp : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::exp(x);
  }
};
struct Log : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::log(x);
  }
};
struct Sqrt : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::sqrt(x);
  }
};
struct Rsqrt : NoAttrs {
  using NoAttrs::NoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::rsqrt(x);
  }
};
struct Tanh : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::tanh(x);
  }
};
struct Sigmoid : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::sigmoid(x);
  }
};
struct Erf : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::erf(x);
  }
};
struct Gelu : CostlyNoAttrs {
  using CostlyNoAttrs::CostlyNoAttrs;
  template <class T>
  T operator()(T x) const {
    return math::gelu(x);
  }
};
struct LeakyRelu {
  double alpha;
  explicit LeakyRelu(const Attrs& attrs) : alpha(attrs.get_float("alpha")) {}
  template <class T>
  T operator()(T x) const {
    return math::leaky_relu(x, alpha);
  }
};
// Bounds compare in double; for integer elements they round inward (ceil of
// min, floor of max) and saturate, so that every result is representable.
struct Clip {
  double lo, hi;
  explicit Clip(const Attrs& attrs) : lo(attrs.get_float("min")), hi(attrs.get_float("max")) {}
  template <class T>
  T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      return math::clip(x, lo, hi);
    } else {
      if (static_cast<double>(x) < lo) return convert<T>(std::ceil(lo));
      if (static_cast<double>(x) > hi) return convert<T>(std::floor(hi));
      return x;
    }
  }
};

// A floating value with no integer to go to fails the op, naming the
// element, its value and the dtype (Note [Cast semantics]).
template <class To, class From>
void check_cast_range(const From* src, int64_t begin, int64_t end, DType to) {
  for (int64_t i = begin; i < end; ++i) {
    TANDEM_CHECK(in_range<To>(src[i]), "cannot cast element ", i, " (",
                 static_cast<double>(widen(src[i])), ") to ", dtype_name(to),
                 ": it is NaN, infinite or beyond the range of ", dtype_name(to));
  }
}

void cast_kernel(const KernelContext& c) {
  const Tensor& in = c.inputs[0];
  const Tensor& out = c.outputs[0];
  int64_t n = in.numel();
  visit_all(in.dtype(), [&]<class From>() {
    visit_all(out.dtype(), [&]<class To>() {
      const From* src = in.data<From>();
      To* dst = out.data<To>();
      parallel_for(n, kCheapGrain, [&](int64_t begin, int64_t end) {
        // The conversion loop stays branch-free (it vectorizes); only a range
        // that holds a bad value looks again to name it.
        bool all_in_range = true;
        for (int64_t i = begin; i < end; ++i) {
          dst[i] = convert<To>(src[i]);
          all_in_range &= in_range<To>(src[i]);
        }
        if (!all_in_range) check_cast_range<To>(src, begin, end, out.dtype());
      });
    });
  });
}

// out[i] = cond[i'] ? a[i''] : b[i'''] over the broadcast shape.
void where_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  const Shape& shape = out.shape();
  int rank = shape.rank();
  Strides strides[3];
  for (int k = 0; k < 3; ++k) strides[k] = broadcast_strides(c.inputs[k].shape(), shape);
  const bool* cond = c.inputs[0].data<bool>();
  visit_all(out.dtype(), [&]<class T>() {
    const T* a = c.inputs[1].data<T>();
    const T* b = c.inputs[2].data<T>();
    T* dst = out.data<T>();
    parallel_for(shape.numel(), kCheapGrain, [&](int64_t begin, int64_t end) {
      // The multi-index of element `begin`, and each input's offset there.
      Strides index(rank, 0);
      int64_t offset[3] = {0, 0, 0};
      int64_t rest = begin;
      for (int axis = rank - 1; axis >= 0; --axis) {
        index[axis] = rest % shape[axis];
        rest /= shape[axis];
        for (int k = 0; k < 3; ++k) offset[k] += index[axis] * strides[k][axis];
      }
      for (int64_t i = begin; i < end; ++i) {
        dst[i] = cond[offset[0]] ? a[offset[1]] : b[offset[2]];
        // Advance the multi-index (innermost axis first) with carries.
        for (int axis = rank - 1; axis >= 0; --axis) {
          for (int k = 0; k < 3; ++k) offset[k] += strides[k][axis];
          if (++index[axis] < shape[axis]) break;
          for (int k = 0; k < 3; ++k) offset[k] -= strides[k][axis] * shape[axis];
          index[axis] = 0;
        }
      }
    });
  });
}

// Gradients, written with ops. `x` is the input, `y` the output.

Tensor scalar_like(double value, const Tensor& t) { return scalar_tensor(value, t.dtype()); }

std::vector<Tensor> neg_gradient(const GradContext& c) { return {op("neg", {c.grad_outputs[0]})}; }

std::vector<Tensor> abs_gradient(const GradContext& c) {
  return {op("mul", {c.grad_outputs[0], op("sign", {c.inputs[0]})})};
}

// sign is piecewise constant: its gradient is zero (not "undefined"), so a
// chain through it yields zeros rather than stopping.
std::vector<Tensor> sign_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {op("mul", {g, scalar_like(0, g)})};
}

std::vector<Tensor> square_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  return {op("mul", {c.grad_outputs[0], op("mul", {x, scalar_like(2, x)})})};
}

std::vector<Tensor> exp_gradient(const GradContext& c) {
  return {op("mul", {c.grad_outputs[0], c.outputs[0]})};
}

std::vector<Tensor> log_gradient(const GradContext& c) {
  return {op("div", {c.grad_outputs[0], c.inputs[0]})};
}

// d sqrt(x) = 1 / (2 sqrt(x)).
std::vector<Tensor> sqrt_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  return {op("div", {c.grad_outputs[0], op("mul", {y, scalar_like(2, y)})})};
}

// d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
std::vector<Tensor> rsqrt_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  Tensor y_cubed = op("mul", {y, op("square", {y})});
  return {op("mul", {c.grad_outputs[0], op("mul", {y_cubed, scalar_like(-0.5, y)})})};
}

// d tanh(x) = 1 - y^2.
std::vector<Tensor> tanh_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  Tensor slope = op("sub", {scalar_like(1, y), op("square", {y})});
  return {op("mul", {c.grad_outputs[0], slope})};
}

// d sigmoid(x) = y (1 - y).
std::vector<Tensor> sigmoid_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  Tensor slope = op("mul", {y, op("sub", {scalar_like(1, y), y})});
  return {op("mul", {c.grad_outputs[0], slope})};
}

// d erf(x) = 2/sqrt(pi) exp(-x^2).
std::vector<Tensor> erf_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  Tensor density = op("exp", {op("neg", {op("square", {x})})});
  Tensor slope = op("mul", {density, scalar_like(std::numbers::inv_sqrtpi * 2, x)});
  return {op("mul", {c.grad_outputs[0], slope})};
}

// d relu(x) = 1 where x > 0, else 0 (0 at x = 0, as in PyTorch).
std::vector<Tensor> relu_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor positive = op("gt", {c.inputs[0], scalar_like(0, c.inputs[0])});
  return {op("mul", {g, op("cast", {positive}, {{"dtype", g.dtype()}})})};
}

std::vector<Tensor> leaky_relu_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor non_negative = op("ge", {c.inputs[0], scalar_like(0, c.inputs[0])});
  Tensor scaled = op("mul", {g, scalar_like(c.attrs.get_float("alpha"), g)});
  return {op("where", {non_negative, g, scaled})};
}

// d x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
std::vector<Tensor> gelu_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  auto times = [&](const Tensor& t, double k) { return op("mul", {t, scalar_like(k, x)}); };
  Tensor erf = op("erf", {times(x, std::numbers::sqrt2 / 2)});
  Tensor cdf = times(op("add", {erf, scalar_like(1, x)}), 0.5);
  Tensor density = times(op("exp", {times(op("square", {x}), -0.5)}),
                         std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  Tensor slope = op("add", {cdf, op("mul", {x, density})});
  return {op("mul", {c.grad_outputs[0], slope})};
}

// The gradient passes where min <= x <= max (at the bounds too, as in PyTorch).
std::vector<Tensor> clip_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Tensor& x = c.inputs[0];
  if (!is_floating_point(x.dtype())) return {Tensor()};
  Tensor above_min = op("ge", {x, scalar_like(c.attrs.get_float("min"), x)});
  Tensor below_max = op("le", {x, scalar_like(c.attrs.get_float("max"), x)});
  Tensor zero = scalar_like(0, g);
  return {op("where", {above_min, op("where", {below_max, g, zero}), zero})};
}

// Between floating dtypes the gradient casts back; anything else (to or from
// an integer or bool) has no gradient.
std::vector<Tensor> cast_gradient(const GradContext& c) {
  DType from = c.inputs[0].dtype();
  if (!is_floating_point(from) || !is_floating_point(c.outputs[0].dtype())) return {Tensor()};
  return {op("cast", {c.grad_outputs[0]}, {{"dtype", from}})};
}

std::vector<Tensor> where_gradient(const GradContext& c) {
  const Tensor& cond = c.inputs[0];
  const Tensor& g = c.grad_outputs[0];
  Tensor zero = scalar_like(0, g);
  return {Tensor(), sum_to(op("where", {cond, g, zero}), c.inputs[1].shape()),
          sum_to(op("where", {cond, zero, g}), c.inputs[2].shape())};
}

OpDef unary(std::string name, InferFn infer, KernelFn kernel, GradientFn gradient,
            std::string doc) {
  return {.name = std::move(name),
          .attrs = {},
          .infer = infer,
          .cpu = kernel,
          .gradient = gradient,
          .doc = std::move(doc)};
}

}  // namespace

void register_elementwise_unary_ops(Registry& registry) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  registry.add(unary("neg", infer_signed_numeric, signed_numeric_kernel<Neg>, neg_gradient, "-x"));
  registry.add(unary("abs", infer_signed_numeric, signed_numeric_kernel<Abs>, abs_gradient, "|x|"));
  registry.add(unary("sign", infer_signed_numeric, signed_numeric_kernel<Sign>, sign_gradient,
                     "-1, 0 or 1 by the sign of x (gradient zero)"));
  registry.add(unary("square", infer_signed_numeric, signed_numeric_kernel<Square>, square_gradient,
                     "x * x"));
  registry.add(
      unary("relu", infer_signed_numeric, signed_numeric_kernel<Relu>, relu_gradient, "max(x, 0)"));
  registry.add(unary("exp", infer_floating, floating_kernel<Exp>, exp_gradient, "e^x"));
  registry.add(unary("log", infer_floating, floating_kernel<Log>, log_gradient, "natural log"));
  registry.add(unary("sqrt", infer_floating, floating_kernel<Sqrt>, sqrt_gradient, "x^(1/2)"));
  registry.add(unary("rsqrt", infer_floating, floating_kernel<Rsqrt>, rsqrt_gradient, "x^(-1/2)"));
  registry.add(unary("tanh", infer_floating, floating_kernel<Tanh>, tanh_gradient, "tanh(x)"));
  registry.add(unary("sigmoid", infer_floating, floating_kernel<Sigmoid>, sigmoid_gradient,
                     "1 / (1 + e^-x)"));
  registry.add(
      unary("erf", infer_floating, floating_kernel<Erf>, erf_gradient, "the error function"));
  registry.add(unary("gelu", infer_floating, floating_kernel<Gelu>, gelu_gradient,
                     "x * Phi(x), the exact (erf) form"));

  OpDef leaky_relu = unary("leaky_relu", infer_floating, floating_kernel<LeakyRelu>,
                           leaky_relu_gradient, "x if x >= 0 else alpha * x");
  leaky_relu.attrs = {{.name = "alpha", .default_value = 0.01}};
  registry.add(std::move(leaky_relu));

  OpDef clip = unary("clip", infer_clip, signed_numeric_kernel<Clip>, clip_gradient,
                     "x limited to [min, max]");
  clip.attrs = {{.name = "min", .default_value = -kInf}, {.name = "max", .default_value = kInf}};
  registry.add(std::move(clip));

  registry.add({.name = "cast",
                .attrs = {{.name = "dtype", .default_value = DType::kFloat32, .required = true}},
                .infer = infer_cast,
                .cpu = cast_kernel,
                .gradient = cast_gradient,
                .doc = "x converted to `dtype` (see Note [Cast semantics])"});
  registry.add({.name = "where",
                .num_inputs = 3,
                .attrs = {},
                .infer = infer_where,
                .cpu = where_kernel,
                .gradient = where_gradient,
                .doc = "cond ? a : b, broadcasting all three"});
}

}  // namespace tandem::kernels
