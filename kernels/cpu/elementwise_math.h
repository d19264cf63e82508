// The scalar math of the elementwise ops, one function per op. Internal to
// kernels/. Integer elements take the arithmetic of kernels/integer_math.h
// (Note [Integer arithmetic]): no undefined behaviour on overflow.
//
//   float y = math::gelu(x);
//   double z = math::clip(x, /*lo=*/0.0, /*hi=*/6.0);
//
// The functors of elementwise_unary.cc and elementwise_binary.cc and the
// fused kernel (kernels/ops/fused_elementwise.cc) all compute with these, so
// that fusing a chain of ops does not change its values, bit for bit.
#pragma once

#include <cmath>
#include <numbers>
#include <type_traits>

#include "kernels/integer_math.h"

namespace tandem::kernels::math {

template <class T>
T neg(T x) {
  if constexpr (std::is_integral_v<T>) {
    return integer::neg(x);
  } else {
    return -x;
  }
}
template <class T>
T abs(T x) {
  if constexpr (std::is_integral_v<T>) {
    return integer::abs(x);
  } else {
    return x < T{0} ? -x : x;
  }
}
// -1, 0 or 1; NaN stays NaN.
template <class T>
T sign(T x) {
  if (x > T{0}) return T{1};
  if (x < T{0}) return T{-1};
  return x;
}
template <class T>
T square(T x) {
  if constexpr (std::is_integral_v<T>) {
    return integer::mul(x, x);
  } else {
    return x * x;
  }
}
// NaN propagates.
template <class T>
T relu(T x) {
  return x > T{0} ? x : (x != x ? x : T{0});
}
template <class T>
T exp(T x) {
  return std::exp(x);
}
template <class T>
T log(T x) {
  return std::log(x);
}
template <class T>
T sqrt(T x) {
  return std::sqrt(x);
}
template <class T>
T rsqrt(T x) {
  return T{1} / std::sqrt(x);
}
template <class T>
T tanh(T x) {
  return std::tanh(x);
}
// Written so that neither branch overflows: exp of a non-positive number only.
template <class T>
T sigmoid(T x) {
  if (x >= T{0}) return T{1} / (T{1} + std::exp(-x));
  T e = std::exp(x);
  return e / (T{1} + e);
}
template <class T>
T erf(T x) {
  return std::erf(x);
}
// x * Phi(x) with Phi the standard normal CDF (PyTorch's default gelu).
template <class T>
T gelu(T x) {
  return x * T{0.5} * (T{1} + std::erf(x * static_cast<T>(std::numbers::sqrt2 / 2)));
}
// `alpha` multiplies in double, as the op's attribute is a double.
template <class T>
T leaky_relu(T x, double alpha) {
  return x >= T{0} ? x : static_cast<T>(alpha * x);
}
// One expression, not early returns, so that loops over it vectorize.
template <class T>
T clip(T x, double lo, double hi) {
  T lo_t = static_cast<T>(lo), hi_t = static_cast<T>(hi);
  return x < lo_t ? lo_t : (x > hi_t ? hi_t : x);
}

template <class T>
T add(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return integer::add(x, y);
  } else {
    return x + y;
  }
}
template <class T>
T sub(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return integer::sub(x, y);
  } else {
    return x - y;
  }
}
template <class T>
T mul(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    return integer::mul(x, y);
  } else {
    return x * y;
  }
}
// Floating division and power; the integer ones, which may fail, are the
// Div and Pow functors' (kernels/ops/elementwise_binary.cc).
template <class T>
T div(T x, T y) {
  return x / y;
}
template <class T>
T pow(T x, T y) {
  return std::pow(x, y);
}
// NaN in either operand gives NaN, as in NumPy's maximum/minimum.
template <class T>
T maximum(T x, T y) {
  if (x != x || y != y) return x != x ? x : y;
  return x > y ? x : y;
}
template <class T>
T minimum(T x, T y) {
  if (x != x || y != y) return x != x ? x : y;
  return x < y ? x : y;
}

}  // namespace tandem::kernels::math
