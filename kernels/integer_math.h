// Integer arithmetic of the elementwise ops and reductions, with no
// undefined behaviour for any operands: one definition for the formulas of
// kernels/elementwise_ops.h, which serve the CPU and the CUDA kernels.
//
//   int32_t a = integer::add(INT32_MAX, 1);   // INT32_MIN: wraps
//   int64_t q = integer::div(INT64_MIN, -1);  // INT64_MIN: wraps, no trap
//   int64_t p = integer::pow(3, 4);           // 81, exact
//
// Note [Integer arithmetic]
// Integer elements (int32, int64, uint8) follow two's complement, as NumPy
// and PyTorch do:
// - add, sub, mul, neg, abs, square and sum wrap around modulo 2^bits
//   (abs(INT_MIN) is INT_MIN), computed in the unsigned type of the same
//   width, so that overflow is defined rather than undefined behaviour;
// - div truncates toward zero (C++'s /, PyTorch's div with
//   rounding_mode="trunc"), and INT_MIN / -1 wraps to INT_MIN where the
//   hardware division would trap (SIGFPE on x86);
// - pow is exact (repeated multiplication, wrapping); a negative exponent
//   gives the truncated 1 / x^-y: 1 for x = 1, +-1 for x = -1, 0 otherwise;
// - division by zero (x / 0, and 0 to a negative power) is an error on the
//   CPU, a tandem::Error naming the operands, as in PyTorch's CPU kernels;
//   a CUDA kernel cannot fail its op without the host waiting for the data,
//   so there it gives 0 (kernels/cuda/README.md, "What a GPU kernel cannot
//   do"). The functions here take a non-zero divisor; the callers choose.
// Tandem has no integer remainder or floor-division op.
#pragma once

#include <type_traits>

#include "kernels/host_device.h"

namespace tandem::kernels::integer {

// The unsigned type of T's width: arithmetic there wraps by definition, and
// converting back is modular (C++20). uint8 promotes to int, whose results
// for two uint8 operands never overflow.
template <class T>
using Wide = std::make_unsigned_t<T>;

template <class T>
TANDEM_HOST_DEVICE constexpr T add(T x, T y) {
  return static_cast<T>(static_cast<Wide<T>>(x) + static_cast<Wide<T>>(y));
}
template <class T>
TANDEM_HOST_DEVICE constexpr T sub(T x, T y) {
  return static_cast<T>(static_cast<Wide<T>>(x) - static_cast<Wide<T>>(y));
}
template <class T>
TANDEM_HOST_DEVICE constexpr T mul(T x, T y) {
  return static_cast<T>(static_cast<Wide<T>>(x) * static_cast<Wide<T>>(y));
}
template <class T>
TANDEM_HOST_DEVICE constexpr T neg(T x) {
  return sub(T{0}, x);
}
template <class T>
TANDEM_HOST_DEVICE constexpr T abs(T x) {
  if constexpr (std::is_signed_v<T>) {
    return x < T{0} ? neg(x) : x;
  } else {
    return x;
  }
}

// x / y truncated toward zero; `y` must not be 0.
template <class T>
TANDEM_HOST_DEVICE constexpr T div(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y == T{-1}) return neg(x);  // INT_MIN / -1 would trap.
  }
  return static_cast<T>(x / y);
}

// Whether pow(x, y) divides by zero: 0 to a negative power.
template <class T>
TANDEM_HOST_DEVICE constexpr bool pow_divides_by_zero(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    return x == T{0} && y < T{0};
  } else {
    return false;
  }
}

// x to the power y, wrapping; a negative y gives the truncated 1 / x^-y.
// pow_divides_by_zero(x, y) must be false.
template <class T>
TANDEM_HOST_DEVICE constexpr T pow(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y < T{0}) {
      if (x == T{1}) return T{1};
      if (x == T{-1}) return (y & T{1}) != T{0} ? T{-1} : T{1};
      return T{0};
    }
  }
  T result{1};
  for (T base = x; y != T{0}; y = static_cast<T>(y >> 1)) {
    if ((y & T{1}) != T{0}) result = mul(result, base);
    base = mul(base, base);
  }
  return result;
}

}  // namespace tandem::kernels::integer
