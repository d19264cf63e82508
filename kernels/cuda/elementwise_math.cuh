// The scalar math of the elementwise ops for CUDA kernels: the counterpart of
// kernels/cpu/elementwise_math.h, written the same way expression by
// expression so that both devices agree to float rounding. Included by
// elementwise.cu only. (Host code may call it too, for tests.)
//
//   float y = apply(MathOp::kClip, x, x, /*p0=min*/ 0.0, /*p1=max*/ 6.0);
//
// One switch serves the unary kernels, the binary kernels and the fused
// interpreter: the first two pass a compile-time MathOp, which the compiler
// folds to the one case; the interpreter passes the op it decoded.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "kernels/cuda/element_types.cuh"

namespace tandem::kernels::cuda {

// The ops of fused programs (Note [Fused elementwise programs] in
// kernels/ops/fused_elementwise.cc); unary ones ignore their second operand.
enum class MathOp : uint8_t {
  kNeg,
  kAbs,
  kSign,
  kSquare,
  kRelu,
  kExp,
  kLog,
  kSqrt,
  kRsqrt,
  kTanh,
  kSigmoid,
  kErf,
  kGelu,
  kLeakyRelu,  // p0: alpha.
  kClip,       // p0: min, p1: max.
  kAdd,
  kSub,
  kMul,
  kDiv,
  kPow,
  kMaximum,
  kMinimum,
};

// x op y for float32, float64, int32, int64 and uint8, as the CPU functors
// compute it (integer division by zero gives 0; clip of an integer rounds the
// bounds inward and saturates).
template <class T>
__host__ __device__ __forceinline__ T apply(MathOp op, T x, T y, double p0, double p1) {
  constexpr T kZero{0}, kOne{1};
  if constexpr (std::is_floating_point_v<T>) {
    switch (op) {
      case MathOp::kExp:
        return ::exp(x);
      case MathOp::kLog:
        return ::log(x);
      case MathOp::kSqrt:
        return ::sqrt(x);
      case MathOp::kRsqrt:
        return kOne / ::sqrt(x);
      case MathOp::kTanh:
        return ::tanh(x);
      case MathOp::kSigmoid:
        // Neither branch overflows: exp of a non-positive number only.
        if (x >= kZero) return kOne / (kOne + ::exp(-x));
        return ::exp(x) / (kOne + ::exp(x));
      case MathOp::kErf:
        return ::erf(x);
      case MathOp::kGelu:
        return x * T{0.5} * (kOne + ::erf(x * static_cast<T>(std::numbers::sqrt2 / 2)));
      case MathOp::kLeakyRelu:
        return x >= kZero ? x : static_cast<T>(p0 * x);
      case MathOp::kClip: {
        T lo = static_cast<T>(p0), hi = static_cast<T>(p1);
        return x < lo ? lo : (x > hi ? hi : x);
      }
      case MathOp::kDiv:
        return x / y;
      case MathOp::kPow:
        return ::pow(x, y);
      default:
        break;
    }
  } else {
    switch (op) {
      case MathOp::kClip:
        if (static_cast<double>(x) < p0) return convert<T>(::ceil(p0));
        if (static_cast<double>(x) > p1) return convert<T>(::floor(p1));
        return x;
      case MathOp::kDiv:
        return y == kZero ? kZero : static_cast<T>(x / y);
      case MathOp::kPow:
        return static_cast<T>(::pow(static_cast<double>(x), static_cast<double>(y)));
      default:
        break;
    }
  }
  // uint8 has the binary arithmetic only.
  if constexpr (std::is_signed_v<T>) {
    switch (op) {
      case MathOp::kNeg:
        return -x;
      case MathOp::kAbs:
        return x < kZero ? -x : x;
      case MathOp::kSign:
        if (x > kZero) return kOne;
        if (x < kZero) return -kOne;
        return x;  // 0, or NaN.
      case MathOp::kSquare:
        return x * x;
      case MathOp::kRelu:
        return x > kZero ? x : (x != x ? x : kZero);  // NaN propagates.
      default:
        break;
    }
  }
  switch (op) {
    case MathOp::kAdd:
      return static_cast<T>(x + y);
    case MathOp::kSub:
      return static_cast<T>(x - y);
    case MathOp::kMul:
      return static_cast<T>(x * y);
    // NaN in either operand gives NaN, as in NumPy.
    case MathOp::kMaximum:
      if (x != x || y != y) return x != x ? x : y;
      return x > y ? x : y;
    case MathOp::kMinimum:
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
