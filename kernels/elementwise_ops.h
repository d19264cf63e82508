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
struct Square;
struct Sign;
struct Rsqrt;
struct Exp;
struct Erf;
struct Tanh;
struct Sigmoid;
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

// NaN propagates. The gradient is 1 where x > 0, else 0 (0 at x = 0, as in
// PyTorch).
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
    return d.g * d.mask(d.gt(d.x, 0.0));
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

// Binary arithmetic (float32, float64, int32, int64, uint8). Their kernels,
// schemas and gradients are kernels/ops/elementwise_binary.cc's.

struct Add : ElementwiseDefaults {
  static constexpr std::string_view kName = "add";
  static constexpr int kArity = 2;
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

using UnaryOps = ElementwiseOpList<Neg, Abs, Sign, Square, Relu, Exp, Log, Sqrt, Rsqrt, Tanh,
                                   Sigmoid, Erf, Gelu, LeakyRelu, Clip>;
using BinaryOps = ElementwiseOpList<Add, Sub, Mul, Div, Pow, Maximum, Minimum>;

// Every op, unary then binary: the codes of fused programs.
using ElementwiseOps = UnaryOps::Append<BinaryOps>;

}  // namespace tandem::kernels::elementwise
