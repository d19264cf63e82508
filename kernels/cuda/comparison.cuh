// The comparisons of the CUDA kernels (kernels/cuda/elementwise.cu); the
// arithmetic and unary ops compute the formulas of kernels/elementwise_ops.h,
// as the CPU kernels do.
//
//   bool less = compare(Comparison::kLt, x, y);
#pragma once

#include <cstdint>

#include "kernels/cuda/element_types.cuh"

namespace tandem::kernels::cuda {

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
