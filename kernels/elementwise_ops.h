// The elementwise ops, one struct each: name, traits, formula and gradient
// (kernels/elementwise_formula.h says what each declares). This list is the
// only place an elementwise op is written down. From it:
//   - the registry gets one op per unary struct (kernels/ops/elementwise_unary.cc)
//     with its schema, CPU kernel and gradient, and the CUDA backend its
//     kernel (kernels/cuda/elementwise.cu);
//   - fused_elementwise programs may use every op here (kernels/fused_program.h),
//     and elementwise fusion fuses them (trace/passes/elementwise_fusion.cc);
//   - conv2d and linear fuse every op with a PostOp (Note [Fused activation]).
// The binary ops' kernels live in kernels/ops/elementwise_binary.cc, which
// computes with these formulas too.
//
// Adding a unary op: a struct here and its name in UnaryOps below; an eager
// function (eager/ops.h); an nn module where torch has one; test rows.
//
// Integer elements take the arithmetic of kernels/integer_math.h (Note
// [Integer arithmetic]). Formulas are written as one expression where they
// can be, so that loops over them vectorize.
#pragma once

#include <array>
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "kernels/element_cast.h"
#include "kernels/elementwise_formula.h"
#include "kernels/host_device.h"
#include "kernels/integer_math.h"

namespace tandem::kernels::elementwise {

// Written so that neither branch overflows: exp of a non-positive number only.
template <class T>
TANDEM_HOST_DEVICE T stable_sigmoid(T x) {
  if (x >= T{0}) return T{1} / (T{1} + std::exp(-x));
  T e = std::exp(x);
  return e / (T{1} + e);
}

// Ops whose gradient names another op of the list, declared ahead.
struct Sin;
struct Cos;
struct Sinh;
struct Cosh;
struct Square;
struct Sign;
struct Rsqrt;
struct Exp;
struct Erf;
struct Tanh;
struct Sigmoid;
struct Softplus;
struct Abs;

// Arithmetic and sign (float32, float64, int32, int64).

struct Neg : ElementwiseDefaults {
  static constexpr std::string_view kName = "neg", kDoc = "-x";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::neg(x);
    } else {
      return -x;
    }
  }
  template <class D>
  static auto gradient(const D& d) {
    return -d.g;
  }
};

struct Abs : ElementwiseDefaults {
  static constexpr std::string_view kName = "abs", kDoc = "|x|";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::abs(x);
    } else {
      return x < T{0} ? -x : x;
    }
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Sign>(d.x);
  }
};

// -1, 0 or 1; NaN stays NaN. Piecewise constant: its gradient is zero (not
// "undefined"), so a chain through it yields zeros rather than stopping.
struct Sign : ElementwiseDefaults {
  static constexpr std::string_view kName = "sign",
                                    kDoc = "-1, 0 or 1 by the sign of x (gradient zero)";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if (x > T{0}) return T{1};
    if (x < T{0}) return T{-1};
    return x;
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * 0.0;
  }
};

struct Square : ElementwiseDefaults {
  static constexpr std::string_view kName = "square", kDoc = "x * x";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::mul(x, x);
    } else {
      return x * x;
    }
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * (d.x * 2.0);
  }
};

// NaN propagates. The gradient passes where x > 0, else it is 0 (0 at x = 0,
// as in PyTorch's threshold_backward, whatever g is there): two passes, a
// comparison and a where, where g * (x > 0) took three (the cast of the mask).
// It asks x > 0 rather than the same y > 0 on purpose: a training graph then
// reads the pre-activation, so activation fusion leaves relu apart from its
// layer there, and on AVX2 oneDNN's gemm-based matmul with a relu post-op
// was slower than the product and a relu pass (the standard MLP's traced
// step at batch 64: 49-61k samples/s fused, 62-64k apart).
struct Relu : ElementwiseDefaults {
  static constexpr std::string_view kName = "relu", kDoc = "max(x, 0)";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kRelu};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x > T{0} ? x : (x != x ? x : T{0});
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.gt(d.x, 0.0), d.g, 0.0);
  }
};

// Exponentials and logarithms.

struct Exp : ElementwiseDefaults {
  static constexpr std::string_view kName = "exp", kDoc = "e^x";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::exp(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * d.y;
  }
};

struct Log : ElementwiseDefaults {
  static constexpr std::string_view kName = "log", kDoc = "natural log";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::log(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g / d.x;
  }
};

// d sqrt(x) = 1 / (2 sqrt(x)).
struct Sqrt : ElementwiseDefaults {
  static constexpr std::string_view kName = "sqrt", kDoc = "x^(1/2)";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::sqrt(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g / (d.y * 2.0);
  }
};

// d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3.
struct Rsqrt : ElementwiseDefaults {
  static constexpr std::string_view kName = "rsqrt", kDoc = "x^(-1/2)";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return T{1} / std::sqrt(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * ((d.y * apply_op<Square>(d.y)) * -0.5);
  }
};

// d (1/x) = -1/x^2 = -y^2.
struct Reciprocal : ElementwiseDefaults {
  static constexpr std::string_view kName = "reciprocal", kDoc = "1 / x";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return T{1} / x;
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * -apply_op<Square>(d.y);
  }
};

// Trigonometric and hyperbolic functions: libm's, which keep asinh, atanh
// and friends accurate near 0.

struct Sin : ElementwiseDefaults {
  static constexpr std::string_view kName = "sin", kDoc = "sine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::sin(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Cos>(d.x);
  }
};

struct Cos : ElementwiseDefaults {
  static constexpr std::string_view kName = "cos", kDoc = "cosine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::cos(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * -apply_op<Sin>(d.x);
  }
};

// d tan(x) = 1 + tan(x)^2.
struct Tan : ElementwiseDefaults {
  static constexpr std::string_view kName = "tan", kDoc = "tangent";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::tan(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * (1.0 + apply_op<Square>(d.y));
  }
};

struct Asin : ElementwiseDefaults {
  static constexpr std::string_view kName = "asin", kDoc = "arcsine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::asin(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Rsqrt>(1.0 - apply_op<Square>(d.x));
  }
};

struct Acos : ElementwiseDefaults {
  static constexpr std::string_view kName = "acos", kDoc = "arccosine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::acos(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * -apply_op<Rsqrt>(1.0 - apply_op<Square>(d.x));
  }
};

struct Atan : ElementwiseDefaults {
  static constexpr std::string_view kName = "atan", kDoc = "arctangent";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::atan(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g / (1.0 + apply_op<Square>(d.x));
  }
};

struct Sinh : ElementwiseDefaults {
  static constexpr std::string_view kName = "sinh", kDoc = "hyperbolic sine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::sinh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Cosh>(d.x);
  }
};

struct Cosh : ElementwiseDefaults {
  static constexpr std::string_view kName = "cosh", kDoc = "hyperbolic cosine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::cosh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Sinh>(d.x);
  }
};

// d tanh(x) = 1 - y^2.
struct Tanh : ElementwiseDefaults {
  static constexpr std::string_view kName = "tanh", kDoc = "tanh(x)";
  static constexpr bool kCostly = true;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kTanh};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::tanh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * (1.0 - apply_op<Square>(d.y));
  }
};

struct Asinh : ElementwiseDefaults {
  static constexpr std::string_view kName = "asinh", kDoc = "inverse hyperbolic sine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::asinh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Rsqrt>(apply_op<Square>(d.x) + 1.0);
  }
};

struct Acosh : ElementwiseDefaults {
  static constexpr std::string_view kName = "acosh", kDoc = "inverse hyperbolic cosine";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::acosh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * apply_op<Rsqrt>(apply_op<Square>(d.x) - 1.0);
  }
};

struct Atanh : ElementwiseDefaults {
  static constexpr std::string_view kName = "atanh", kDoc = "inverse hyperbolic tangent";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::atanh(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g / (1.0 - apply_op<Square>(d.x));
  }
};

// Rounding. Piecewise constant: gradient zero, as sign's.

struct Floor : ElementwiseDefaults {
  static constexpr std::string_view kName = "floor", kDoc = "largest integer <= x";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::floor(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * 0.0;
  }
};

struct Ceil : ElementwiseDefaults {
  static constexpr std::string_view kName = "ceil", kDoc = "smallest integer >= x";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::ceil(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * 0.0;
  }
};

// Halves go to the even neighbour (the default rounding mode), as in
// torch.round and NumPy.
struct Round : ElementwiseDefaults {
  static constexpr std::string_view kName = "round", kDoc = "nearest integer, halves to even";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::nearbyint(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * 0.0;
  }
};

struct Trunc : ElementwiseDefaults {
  static constexpr std::string_view kName = "trunc", kDoc = "x rounded toward zero";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::trunc(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * 0.0;
  }
};

// Activations.

// d sigmoid(x) = y (1 - y).
struct Sigmoid : ElementwiseDefaults {
  static constexpr std::string_view kName = "sigmoid", kDoc = "1 / (1 + e^-x)";
  static constexpr bool kCostly = true;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kLogistic};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return stable_sigmoid(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * (d.y * (1.0 - d.y));
  }
};

// d erf(x) = 2/sqrt(pi) exp(-x^2).
struct Erf : ElementwiseDefaults {
  static constexpr std::string_view kName = "erf", kDoc = "the error function";
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return std::erf(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g * (apply_op<Exp>(-apply_op<Square>(d.x)) * (std::numbers::inv_sqrtpi * 2));
  }
};

// x * Phi(x) with Phi the standard normal CDF (PyTorch's default gelu);
// d x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi).
struct Gelu : ElementwiseDefaults {
  static constexpr std::string_view kName = "gelu", kDoc = "x * Phi(x), the exact (erf) form";
  static constexpr bool kCostly = true;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kGeluErf};
  static constexpr double kInvSqrt2 = 0.7071067811865476;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x * T{0.5} * (T{1} + std::erf(x * static_cast<T>(kInvSqrt2)));
  }
  template <class D>
  static auto gradient(const D& d) {
    constexpr double kInvSqrt2Pi = std::numbers::inv_sqrtpi / std::numbers::sqrt2;
    auto cdf = (apply_op<Erf>(d.x * kInvSqrt2) + 1.0) * 0.5;
    auto density = apply_op<Exp>(apply_op<Square>(d.x) * -0.5) * kInvSqrt2Pi;
    return d.g * (cdf + d.x * density);
  }
};

// `alpha` multiplies in double, as the op's attribute is a double.
struct LeakyRelu : ElementwiseDefaults {
  static constexpr std::string_view kName = "leaky_relu", kDoc = "x if x >= 0 else alpha * x";
  static constexpr std::array<FormulaParam, 1> kParams = {{{"alpha", 0.01}}};
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kRelu, .alpha_is_param = true};
  double alpha;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x >= T{0} ? x : static_cast<T>(alpha * x);
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.ge(d.x, 0.0), d.g, d.g * d.param(0));
  }
};

// x limited to [min, max]. Bounds compare in double; for integer elements
// they round inward (ceil of min, floor of max) and saturate, so that every
// result is representable. The gradient passes where min <= x <= max (at
// the bounds too, as in PyTorch); integers have none.
struct Clip : ElementwiseDefaults {
  static constexpr std::string_view kName = "clip", kDoc = "x limited to [min, max]";
  static constexpr ElementTypes kTypes = ElementTypes::kSignedNumeric;
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  static constexpr std::array<FormulaParam, 2> kParams = {{{"min", -kInf}, {"max", kInf}}};
  static constexpr bool kOrderedParams = true;
  double lo, hi;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) {
      T lo_t = static_cast<T>(lo), hi_t = static_cast<T>(hi);
      return x < lo_t ? lo_t : (x > hi_t ? hi_t : x);
    } else {
      if (static_cast<double>(x) < lo) return convert<T>(std::ceil(lo));
      if (static_cast<double>(x) > hi) return convert<T>(std::floor(hi));
      return x;
    }
  }
  template <class D>
  static auto gradient(const D& d) {
    if (!d.floating()) return d.none();
    return d.where(d.ge(d.x, d.param(0)), d.where(d.le(d.x, d.param(1)), d.g, 0.0), 0.0);
  }
};

// log(1 + e^(beta x)) / beta, and x itself where beta x > threshold (as
// torch.nn.Softplus: linear there, within rounding).
struct Softplus : ElementwiseDefaults {
  static constexpr std::string_view kName = "softplus",
                                    kDoc = "log(1 + e^(beta x)) / beta; x above threshold";
  static constexpr bool kCostly = true;
  static constexpr std::array<FormulaParam, 2> kParams = {{{"beta", 1.0}, {"threshold", 20.0}}};
  double beta, threshold;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    const T bx = static_cast<T>(beta) * x;
    return bx > static_cast<T>(threshold) ? x : std::log1p(std::exp(bx)) / static_cast<T>(beta);
  }
  template <class D>
  static auto gradient(const D& d) {
    auto bx = d.x * d.param(0);
    return d.where(d.gt(bx, d.param(1)), d.g, d.g * apply_op<Sigmoid>(bx));
  }
};

// d x/(1+|x|) = 1/(1+|x|)^2.
struct Softsign : ElementwiseDefaults {
  static constexpr std::string_view kName = "softsign", kDoc = "x / (1 + |x|)";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x / (T{1} + (x < T{0} ? -x : x));
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.g / apply_op<Square>(apply_op<Abs>(d.x) + 1.0);
  }
};

// x above 0, alpha (e^x - 1) below; the gradient below is y + alpha.
struct Elu : ElementwiseDefaults {
  static constexpr std::string_view kName = "elu", kDoc = "x if x > 0 else alpha * (e^x - 1)";
  static constexpr bool kCostly = true;
  static constexpr std::array<FormulaParam, 1> kParams = {{{"alpha", 1.0}}};
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kElu, .alpha_is_param = true};
  double alpha;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x > T{0} ? x : static_cast<T>(alpha * std::expm1(x));
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.gt(d.x, 0.0), d.g, d.g * (d.y + d.param(0)));
  }
};

// scale * elu(x, alpha) with the constants of Klambauer et al. (2017).
struct Selu : ElementwiseDefaults {
  static constexpr std::string_view kName = "selu", kDoc = "scale * elu(x, alpha), fixed constants";
  static constexpr bool kCostly = true;
  static constexpr double kAlpha = 1.6732632423543772848170429916717;
  static constexpr double kScale = 1.0507009873554804934193349852946;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kElu,
                                     .scale = static_cast<float>(kScale),
                                     .alpha = static_cast<float>(kAlpha)};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x > T{0} ? static_cast<T>(kScale * x) : static_cast<T>(kScale * kAlpha * std::expm1(x));
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.gt(d.x, 0.0), d.g * kScale, d.g * (d.y + kScale * kAlpha));
  }
};

// x above 0, alpha (e^(x/alpha) - 1) below.
struct Celu : ElementwiseDefaults {
  static constexpr std::string_view kName = "celu",
                                    kDoc = "x if x > 0 else alpha * (e^(x/alpha) - 1)";
  static constexpr bool kCostly = true;
  static constexpr std::array<FormulaParam, 1> kParams = {{{"alpha", 1.0}}};
  double alpha;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x > T{0} ? x : static_cast<T>(alpha * std::expm1(x / static_cast<T>(alpha)));
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.gt(d.x, 0.0), d.g, d.g * apply_op<Exp>(d.x / d.param(0)));
  }
};

// relu6(x + 3) / 6; the gradient is 1/6 strictly between -3 and 3.
struct Hardsigmoid : ElementwiseDefaults {
  static constexpr std::string_view kName = "hardsigmoid", kDoc = "min(max(x + 3, 0), 6) / 6";
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    T v = x + T{3};
    return (v < T{0} ? T{0} : (v > T{6} ? T{6} : v)) / T{6};
  }
  template <class D>
  static auto gradient(const D& d) {
    return d.where(d.gt(d.x, -3.0), d.where(d.lt(d.x, 3.0), d.g / 6.0, 0.0), 0.0);
  }
};

// x * relu6(x + 3) / 6; the gradient is 0 below -3, (2x + 3) / 6 up to 3,
// and 1 above (as PyTorch's).
struct Hardswish : ElementwiseDefaults {
  static constexpr std::string_view kName = "hardswish", kDoc = "x * min(max(x + 3, 0), 6) / 6";
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kHardswish};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    T v = x + T{3};
    return x * (v < T{0} ? T{0} : (v > T{6} ? T{6} : v)) / T{6};
  }
  template <class D>
  static auto gradient(const D& d) {
    auto middle = d.g * ((d.x * 2.0 + 3.0) / 6.0);
    return d.where(d.lt(d.x, -3.0), 0.0, d.where(d.le(d.x, 3.0), middle, d.g));
  }
};

// x * tanh(softplus(x)); d = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)).
struct Mish : ElementwiseDefaults {
  static constexpr std::string_view kName = "mish", kDoc = "x * tanh(log(1 + e^x))";
  static constexpr bool kCostly = true;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kMish};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    T softplus = x > T{20} ? x : std::log1p(std::exp(x));
    return x * std::tanh(softplus);
  }
  template <class D>
  static auto gradient(const D& d) {
    auto t = apply_op<Tanh>(apply_op<Softplus>(d.x, 1.0, 20.0));
    return d.g * (t + d.x * apply_op<Sigmoid>(d.x) * (1.0 - apply_op<Square>(t)));
  }
};

// x * sigmoid(x); d = s (1 + x (1 - s)), s = sigmoid(x).
struct Silu : ElementwiseDefaults {
  static constexpr std::string_view kName = "silu", kDoc = "x * sigmoid(x) (swish)";
  static constexpr bool kCostly = true;
  static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kSwish, .alpha = 1};
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    return x * stable_sigmoid(x);
  }
  template <class D>
  static auto gradient(const D& d) {
    auto s = apply_op<Sigmoid>(d.x);
    return d.g * (s * (d.x * (1.0 - s) + 1.0));
  }
};

// Tests and logic: bool results, no gradient.

struct Isnan : ElementwiseDefaults {
  static constexpr std::string_view kName = "isnan", kDoc = "whether x is NaN";
  static constexpr bool kBoolResult = true;
  static constexpr bool kDifferentiable = false;
  template <class T>
  TANDEM_HOST_DEVICE bool operator()(T x) const {
    return x != x;
  }
};

struct Isinf : ElementwiseDefaults {
  static constexpr std::string_view kName = "isinf", kDoc = "whether x is +inf or -inf";
  static constexpr bool kBoolResult = true;
  static constexpr bool kDifferentiable = false;
  template <class T>
  TANDEM_HOST_DEVICE bool operator()(T x) const {
    return std::isinf(x);
  }
};

struct LogicalNot : ElementwiseDefaults {
  static constexpr std::string_view kName = "logical_not", kDoc = "x == 0, as bool";
  static constexpr ElementTypes kTypes = ElementTypes::kAll;
  static constexpr bool kBoolResult = true;
  static constexpr bool kDifferentiable = false;
  template <class T>
  TANDEM_HOST_DEVICE bool operator()(T x) const {
    return widen(x) == 0;
  }
};

// ~x; for bool, not x.
struct BitwiseNot : ElementwiseDefaults {
  static constexpr std::string_view kName = "bitwise_not", kDoc = "~x (not x for bool)";
  static constexpr ElementTypes kTypes = ElementTypes::kIntegerOrBool;
  static constexpr bool kDifferentiable = false;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) {
      return !x;
    } else {
      return static_cast<T>(~x);
    }
  }
};

// Binary arithmetic (float32, float64, int32, int64, uint8). Their kernels,
// schemas and gradients are kernels/ops/elementwise_binary.cc's.

struct Add : ElementwiseDefaults {
  static constexpr std::string_view kName = "add";
  static constexpr int kArity = 2;
  static constexpr bool kCommutative = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::add(x, y);
    } else {
      return x + y;
    }
  }
};

struct Sub : ElementwiseDefaults {
  static constexpr std::string_view kName = "sub";
  static constexpr int kArity = 2;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::sub(x, y);
    } else {
      return x - y;
    }
  }
};

struct Mul : ElementwiseDefaults {
  static constexpr std::string_view kName = "mul";
  static constexpr int kArity = 2;
  static constexpr bool kCommutative = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::mul(x, y);
    } else {
      return x * y;
    }
  }
};

// An integer division by zero gives 0 here; the CPU kernel checks for it
// first and fails the op (Note [Integer arithmetic]).
struct Div : ElementwiseDefaults {
  static constexpr std::string_view kName = "div";
  static constexpr int kArity = 2;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return y == T{0} ? T{0} : integer::div(x, y);
    } else {
      return x / y;
    }
  }
};

// As Div: 0 raised to a negative integer power gives 0 here.
struct Pow : ElementwiseDefaults {
  static constexpr std::string_view kName = "pow";
  static constexpr int kArity = 2;
  static constexpr bool kCostly = true;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if constexpr (std::is_integral_v<T>) {
      return integer::pow_divides_by_zero(x, y) ? T{0} : integer::pow(x, y);
    } else {
      return std::pow(x, y);
    }
  }
};

// NaN in either operand gives NaN, as in NumPy's maximum and minimum.
struct Maximum : ElementwiseDefaults {
  static constexpr std::string_view kName = "maximum";
  static constexpr int kArity = 2;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if (x != x || y != y) return x != x ? x : y;
    return x > y ? x : y;
  }
};

struct Minimum : ElementwiseDefaults {
  static constexpr std::string_view kName = "minimum";
  static constexpr int kArity = 2;
  template <class T>
  TANDEM_HOST_DEVICE T operator()(T x, T y) const {
    if (x != x || y != y) return x != x ? x : y;
    return x < y ? x : y;
  }
};

using UnaryOps = ElementwiseOpList<Neg, Abs, Sign, Square, Relu, Exp, Log, Sqrt, Rsqrt, Reciprocal,
                                   Sin, Cos, Tan, Asin, Acos, Atan, Sinh, Cosh, Tanh, Asinh, Acosh,
                                   Atanh, Floor, Ceil, Round, Trunc, Sigmoid, Erf, Gelu, LeakyRelu,
                                   Clip, Softplus, Softsign, Elu, Selu, Celu, Hardsigmoid,
                                   Hardswish, Mish, Silu, Isnan, Isinf, LogicalNot, BitwiseNot>;
using BinaryOps = ElementwiseOpList<Add, Sub, Mul, Div, Pow, Maximum, Minimum>;

// Every op, unary then binary: the codes of fused programs.
using ElementwiseOps = UnaryOps::Append<BinaryOps>;

}  // namespace tandem::kernels::elementwise
