// Converting one element from one element type to another, as the "cast" op
// does: one definition for the CPU kernels and the CUDA kernels, which also
// use it to write a double into any dtype (the creation ops, clip's bounds).
//
//   int32_t i = convert<int32_t>(3.9);        // 3
//   uint8_t u = convert<uint8_t>(-1.0);       // 0: saturates
//   Half h = convert<Half>(1e9);              // inf, through float32
//
// The element types are those of core/dtype.h (Half, BFloat16 and the C++
// scalars) and, in CUDA code, their device types __half and __nv_bfloat16
// (kernels/cuda/element_types.cuh), which have the same bit layouts.
//
// Note [Cast semantics]: float16 and bfloat16 go through float32; anything to
// bool is `x != 0` (NaN is true, as in C++ and NumPy); integer to a narrower
// integer wraps around (two's complement, as in NumPy and PyTorch); floating
// to integer truncates toward zero. A floating value with no integer to go
// to (NaN, an infinity, or one outside the integer's range after truncation;
// in_range below) is an error on the CPU: the cast op fails naming the value
// and the dtype, and a double written into an integer tensor (the value of
// full and pad, arange's range, a scalar operand) is refused at the call
// (check_value_fits in kernels/scalar.h). A CUDA kernel cannot fail
// its op without the host waiting for the data, so on the GPU convert()
// saturates at the integer's range and maps NaN to 0, as it does for every
// caller that wants a total conversion (clip's bounds, which may be
// infinite): no input is undefined behaviour on either device.
#pragma once

#include <limits>
#include <type_traits>

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "core/dtype.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

// float16 and bfloat16 as float32 (what kernels compute in); any other
// element unchanged.
template <class T>
TANDEM_HOST_DEVICE inline auto widen(T x) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return static_cast<float>(x);
#ifdef __CUDACC__
  } else if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
#endif
  } else {
    return x;
  }
}

// Whether convert<To>(from) is exact up to truncation toward zero: false for
// a floating `from` that is NaN, infinite or outside an integer To's range
// after truncation (convert() then saturates); true for every other pair.
template <class To, class From>
TANDEM_HOST_DEVICE inline bool in_range(From from) {
  auto x = widen(from);
  using X = decltype(x);
  if constexpr (std::is_integral_v<To> && !std::is_same_v<To, bool> &&
                std::is_floating_point_v<X>) {
    // Truncation keeps x in range exactly when lowest - 1 < x < max + 1.
    // max + 1 and lowest (0 or -2^digits) are exact in any floating type;
    // lowest - 1 may round to lowest, where no value of X lies between the
    // two, so x >= lowest covers that case. NaN fails every comparison.
    constexpr X kUpper = static_cast<X>(std::numeric_limits<To>::max()) + X{1};
    constexpr X kLowest = static_cast<X>(std::numeric_limits<To>::lowest());
    constexpr X kBelowLowest = kLowest - X{1};
    return (x >= kLowest || x > kBelowLowest) && x < kUpper;
  } else {
    return true;
  }
}

// `from` converted to To by Note [Cast semantics] (saturating where
// in_range<To>(from) is false).
template <class To, class From>
TANDEM_HOST_DEVICE inline To convert(From from) {
  auto x = widen(from);
  using X = decltype(x);
  if constexpr (std::is_same_v<To, bool>) {
    return x != X{0};
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(x));
#ifdef __CUDACC__
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
#endif
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<X>) {
    if (x != x) return To{0};
    // 2^digits bounds are exact in any floating type; compare against them.
    constexpr X kUpper = static_cast<X>(std::numeric_limits<To>::max()) + X{1};
    if (x >= kUpper) return std::numeric_limits<To>::max();
    if (x <= static_cast<X>(std::numeric_limits<To>::lowest())) {
      return std::numeric_limits<To>::lowest();
    }
    return static_cast<To>(x);
  } else {
    return static_cast<To>(x);
  }
}

}  // namespace tandem::kernels
