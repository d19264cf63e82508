// Walking elements on the GPU: a grid-stride launch of a per-element functor,
// and the Indexer that maps an output element to the elements of strided or
// broadcast operands. Included by .cu files only.
//
//   struct AddOne {
//     const float* in;
//     float* out;
//     __device__ void operator()(int64_t i) const { out[i] = in[i] + 1; }
//   };
//   for_each(stream, n, AddOne{in, out});  // No launch when n == 0.
//
//   Indexer<2> ix = make_indexer<2>(out.shape(), {broadcast_strides(a.shape(), out.shape()),
//                                                 broadcast_strides(b.shape(), out.shape())});
//   // In device code: Offsets<2> o = ix(i); a[o.at[0]], b[o.at[1]].
//
// Note [Merged axes]: make_indexer drops axes of size 1 and merges each axis
// into the next inner one wherever every operand steps across both as across
// one axis. Same-shape contiguous operands then become one axis of stride 1
// and a scalar one axis of stride 0: those common cases index with a
// multiply, no division. Up to kMaxRank axes may remain.
#pragma once

#include <array>
#include <cstdint>

#include "core/error.h"
#include "core/shape.h"
#include "kernels/broadcast.h"
#include "kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

// __grid_constant__ lets `f` be read in place from the kernel's parameters,
// not copied per thread, even where its members are indexed at run time.
template <class F>
__global__ void for_each_kernel(int64_t n, const __grid_constant__ F f) {
  const int64_t step = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    f(i);
  }
}

// Calls f(i) for every i in [0, n), on `stream`.
template <class F>
void for_each(cudaStream_t stream, int64_t n, const F& f) {
  if (n <= 0) return;
  for_each_kernel<<<blocks_for(n), kThreadsPerBlock, 0, stream>>>(n, f);
  TANDEM_CUDA_CHECK_LAUNCH();
}

// Axes left after merging (Note [Merged axes]): rank-8 shapes of any layout,
// plus the byte axis of the strided copy in shape.cu.
inline constexpr int kMaxRank = 10;

template <int K>
struct Offsets {
  int64_t at[K];
};

// Element offsets of K operands at each element of a row-major index space.
template <int K>
struct Indexer {
  int rank = 0;
  int64_t sizes[kMaxRank] = {};       // Innermost axis first.
  int64_t strides[kMaxRank][K] = {};  // strides[axis][operand], in elements.

  __host__ __device__ __forceinline__ Offsets<K> operator()(int64_t i) const {
    Offsets<K> offsets = {};
#pragma unroll
    for (int axis = 0; axis < kMaxRank; ++axis) {
      if (axis == rank) break;
      int64_t coordinate = i;
      // The outermost axis needs no division: what is left of i is its coordinate.
      if (axis + 1 < rank) {
        int64_t rest = i / sizes[axis];
        coordinate = i - rest * sizes[axis];
        i = rest;
      }
#pragma unroll
      for (int k = 0; k < K; ++k) offsets.at[k] += coordinate * strides[axis][k];
    }
    return offsets;
  }
};

// The Indexer over `shape` (outermost axis first) for operands read with
// `strides` (per operand, one per axis of `shape`, in elements), merged as
// in Note [Merged axes]. Throws if more than kMaxRank axes remain.
template <int K>
Indexer<K> make_indexer(const Shape& shape, const std::array<Strides, K>& strides) {
  Indexer<K> ix;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    int64_t size = shape[axis];
    if (size == 1) continue;
    int inner = ix.rank - 1;
    bool merges = inner >= 0;
    for (int k = 0; k < K && merges; ++k) {
      merges = strides[k][axis] == ix.strides[inner][k] * ix.sizes[inner];
    }
    if (merges) {
      ix.sizes[inner] *= size;
      continue;
    }
    TANDEM_CHECK(ix.rank < kMaxRank, "shape ", shape.to_string(),
                 " has too many axes for the CUDA kernels: at most ", kMaxRank,
                 " remain after merging contiguous ones");
    ix.sizes[ix.rank] = size;
    for (int k = 0; k < K; ++k) ix.strides[ix.rank][k] = strides[k][axis];
    ++ix.rank;
  }
  return ix;
}

// Row-major element strides of a contiguous tensor of `shape`.
inline Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.rank());
  for (int axis = 0; axis < shape.rank(); ++axis) strides[axis] = shape.stride(axis);
  return strides;
}

}  // namespace tandem::kernels::cuda
