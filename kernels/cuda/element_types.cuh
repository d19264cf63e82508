// Element types on the GPU: the device type of each dtype and filling a
// tensor with one value. Included by .cu files only. Elements convert with
// widen and convert (kernels/element_cast.h), the CPU kernels' own cast
// rules, which under nvcc take __half and __nv_bfloat16 too.
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

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/element_cast.h"

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

template <class U>
struct FillBits {
  U* out;
  U value;
  __device__ void operator()(int64_t i) const { out[i] = value; }
};

// Calls f.template operator()<U>(bits) with `value` converted like
// convert<T>(double) to `dtype`, as the bits of an unsigned integer U of
// its size: for kernels that only move elements.
template <class F>
void with_value_bits(DType dtype, double value, F&& f) {
  visit_all(dtype, [&]<class T>() {
    device_t<T> element = convert<device_t<T>>(value);
    visit_element_bits(sizeof(element), [&]<class U>() {
      U bits;
      std::memcpy(&bits, &element, sizeof(bits));
      f.template operator()<U>(bits);
    });
  });
}

// Writes `value`, converted like convert<T>(double), to every element of
// `out` (any dtype).
inline void fill(const Tensor& out, double value, cudaStream_t stream) {
  with_value_bits(out.dtype(), value, [&]<class U>(U bits) {
    for_each(stream, out.numel(), FillBits<U>{static_cast<U*>(out.raw_data()), bits});
  });
}

}  // namespace tandem::kernels::cuda
