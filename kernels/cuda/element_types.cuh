// Element types on the GPU: the device type of each dtype, Tandem's cast
// semantics for device code, and filling a tensor with one value. Included
// by .cu files only.
//
//   visit_all(t.dtype(), [&]<class T>() {
//     device_t<T>* p = device_data<T>(t);            // __half* for float16
//     fill(t, 1.5, stream);                          // as "full" converts 1.5
//   });
//
// core/dtype.h's Half and BFloat16 have the bit layout of CUDA's __half and
// __nv_bfloat16, so a tensor's pointer is reinterpreted, never converted.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/for_each.cuh"

namespace tandem::kernels::cuda {

template <class T>
struct DeviceType {
  using type = T;
};
template <>
struct DeviceType<Half> {
  using type = __half;
};
template <>
struct DeviceType<BFloat16> {
  using type = __nv_bfloat16;
};
// The type device code uses for elements of C++ type T (dtype.h).
template <class T>
using device_t = typename DeviceType<T>::type;

template <class T>
device_t<T>* device_data(const Tensor& t) {
  return reinterpret_cast<device_t<T>*>(t.data<T>());
}

// float16 and bfloat16 compute in float32, as on the CPU (dtype_visit.h).
template <class T>
__host__ __device__ __forceinline__ auto widen(T x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}

// One element converted as the "cast" op does (Note [Cast semantics] in
// kernels/ops/elementwise_unary.cc): 16-bit floats go through float32;
// anything to bool is x != 0; floating to integer truncates, saturates and
// maps NaN to 0. From a double it is also how the creation ops write values.
template <class To, class From>
__host__ __device__ __forceinline__ To convert(From from) {
  auto x = widen(from);
  using X = decltype(x);
  if constexpr (std::is_same_v<To, bool>) {
    return x != X{0};
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<X>) {
    if (x != x) return To{0};
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

// An unsigned integer as wide as `bytes`: kernels that only move elements
// copy these, one instantiation per element size instead of per dtype.
template <class F>
void visit_element_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

template <class U>
struct FillBits {
  U* out;
  U value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

// Writes `value`, converted like convert<T>(double), to every element of
// `out` (any dtype).
inline void fill(const Tensor& out, double value, cudaStream_t stream) {
  visit_all(out.dtype(), [&]<class T>() {
    device_t<T> element = convert<device_t<T>>(value);
    visit_element_bits(sizeof(element), [&]<class U>() {
      U bits;
      std::memcpy(&bits, &element, sizeof(bits));
      for_each(stream, out.numel(), FillBits<U>{static_cast<U*>(out.raw_data()), bits});
    });
  });
}

}  // namespace tandem::kernels::cuda
