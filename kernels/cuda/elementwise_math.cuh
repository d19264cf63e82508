// The scalar math of the elementwise ops for CUDA kernels: the counterpart of
// kernels/cpu/elementwise_math.h, written the same way expression by
// expression so that both devices agree to float rounding. Included by
// elementwise.cu and bias_activation.cu. (Host code may call it too, for
// tests.)
//
//   float y = apply(ElementwiseOp::kClip, x, x, /*p0=min*/ 0.0, /*p1=max*/ 6.0);
//
// One switch serves the unary kernels, the binary kernels and the fused
// interpreter: the first two pass a compile-time ElementwiseOp (the op codes
// of fused programs, kernels/fused_program.h), which the compiler folds to
// the one case; the interpreter passes the op of each instruction. Unary ops
// ignore their second operand; p0 and p1 are the op's parameters
// (FusedInstr::params).
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "kernels/cuda/element_types.cuh"
#include "kernels/fused_program.h"
#include "kernels/integer_math.h"

namespace tandem::kernels::cuda {

// x op y for float32, float64, int32, int64 and uint8, as the CPU functors
// compute it: integers by Note [Integer arithmetic] (kernels/integer_math.h),
// except that a division by zero gives 0 where the CPU fails the op; clip of
// an integer rounds the bounds inward and saturates.
template <class T>
__host__ __device__ __forceinline__ T apply(ElementwiseOp op, T x, T y, double p0, double p1) {
  constexpr T kZero{0}, kOne{1};
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case ElementwiseOp::kExp:
        return ::exp(x);
      case ElementwiseOp::kLog:
        return ::log(x);
      case ElementwiseOp::kSqrt:
        return ::sqrt(x);
      case ElementwiseOp::kRsqrt:
        return kOne / ::sqrt(x);
      case ElementwiseOp::kTanh:
        return ::tanh(x);
      case ElementwiseOp::kSigmoid:
        // Neither branch overflows: exp of a non-positive number only.
        if (x >= kZero) return kOne / (kOne + ::exp(-x));
        return ::exp(x) / (kOne + ::exp(x));
      case ElementwiseOp::kErf:
        return ::erf(x);
      case ElementwiseOp::kGelu:
        return x * T{0.5} * (kOne + ::erf(x * static_cast<T>(std::numbers::sqrt2 / 2)));
      case ElementwiseOp::kLeakyRelu:
        return x >= kZero ? x : static_cast<T>(p0 * x);
      case ElementwiseOp::kClip: {
        T lo = static_cast<T>(p0), hi = static_cast<T>(p1);
        return x < lo ? lo : (x > hi ? hi : x);
      }
      case ElementwiseOp::kDiv:
        return x / y;
      case ElementwiseOp::kPow:
        return ::pow(x, y);
      default:
        break;
    }
  } else {
    switch (op) {
      case ElementwiseOp::kClip:
        if (static_cast<double>(x) < p0) return convert<T>(::ceil(p0));
        if (static_cast<double>(x) > p1) return convert<T>(::floor(p1));
        return x;
      case ElementwiseOp::kAdd:
        return integer::add(x, y);
      case ElementwiseOp::kSub:
        return integer::sub(x, y);
      case ElementwiseOp::kMul:
        return integer::mul(x, y);
      case ElementwiseOp::kDiv:
        return y == kZero ? kZero : integer::div(x, y);
      case ElementwiseOp::kPow:
        return integer::pow_divides_by_zero(x, y) ? kZero : integer::pow(x, y);
      case ElementwiseOp::kNeg:
        return integer::neg(x);
      case ElementwiseOp::kAbs:
        return integer::abs(x);
      case ElementwiseOp::kSquare:
        return integer::mul(x, x);
      default:
        break;
    }
  }
  // uint8 has the binary arithmetic only.
  if constexpr (std::is_signed_v<T>) {
    switch (op) {
      case ElementwiseOp::kNeg:
        return -x;
      case ElementwiseOp::kAbs:
        return x < kZero ? -x : x;
      case ElementwiseOp::kSign:
        if (x > kZero) return kOne;
        if (x < kZero) return -kOne;
        return x;  // 0, or NaN.
      case ElementwiseOp::kSquare:
        return x * x;
      case ElementwiseOp::kRelu:
        return x > kZero ? x : (x != x ? x : kZero);  // NaN propagates.
      default:
        break;
    }
  }
  switch (op) {
    case ElementwiseOp::kAdd:
      return static_cast<T>(x + y);
    case ElementwiseOp::kSub:
      return static_cast<T>(x - y);
    case ElementwiseOp::kMul:
      return static_cast<T>(x * y);
    // NaN in either operand gives NaN, as in NumPy.
    case ElementwiseOp::kMaximum:
      if (x != x || y != y) return x != x ? x : y;
      return x > y ? x : y;
    case ElementwiseOp::kMinimum:
      if (x != x || y != y) return x != x ? x : y;
      return x < y ? x : y;
    default:
      return x;  // Not reached: inference admits only the ops T supports.
  }
}

enum class Comparison : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };

// x cmp y for every dtype; float16 and bfloat16 compare as float32.
template <class T>
__host__ __device__ __forceinline__ bool compare(Comparison cmp, T a, T b) {
  auto x = widen(a), y = widen(b);
  switch (cmp) {
    case Comparison::kEq:
      return x == y;
    case Comparison::kNe:
      return x != y;
    case Comparison::kLt:
      return x < y;
    case Comparison::kLe:
      return x <= y;
    case Comparison::kGt:
      return x > y;
    case Comparison::kGe:
      return x >= y;
  }
  return false;
}

}  // namespace tandem::kernels::cuda
