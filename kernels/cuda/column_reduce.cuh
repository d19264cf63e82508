// Reductions on the GPU, shared by reduce.cu, softmax_loss.cu and norm.cu: a
// contiguous tensor seen as columns (one per index of the kept axes) of
// values to fold (the reduced axes), and a block-wide fold of one column.
// Included by .cu files only.
//
//   // y = x - mean(x) along axis 1 of x [a, b, c]:
//   ReduceLayout l = make_reduce_layout(x.shape().dims(), {1});
//   center<<<l.grid(), l.block(), 0, stream>>>(l, x.data<float>(), y.data<float>());
//
//   __global__ void center(ReduceLayout l, const float* x, float* y) {
//     for_each_column(l, [&](const Column& col) {
//       double mean = column_reduce(l, col, SumOf<float>{x}) / l.num_reduced;
//       for_each_reduced(l, col, [&](int64_t offset, int64_t) { y[offset] = x[offset] - mean; });
//     });
//   }
//
// An op is a small struct: `Acc`, `identity()`, `map(offset, r)` (the value
// at element `offset`, the r-th of its column in row-major order over the
// reduced axes) and an associative `combine(a, b)`.
//
// Note [Column blocks]
// A block is blockDim.x columns by blockDim.y threads per column (a power of
// two), kThreadsPerBlock in all. When the innermost axis is reduced, a
// column's values are contiguous and blockDim.y takes as many of them as it
// can (one block per column for long rows); otherwise neighbouring columns
// are neighbours in memory and blockDim.x takes up to 32 of them. Either way a
// warp reads consecutive addresses. Each thread folds its strided share of
// the column in order, then the block combines the shares as a tree in shared
// memory: deterministic, and, with double accumulators for floating types, as
// precise as the CPU kernels' double sums.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "absl/types/span.h"

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

// Adjacent axes of the same kind merge when contiguous, so most layouts have
// one or two dims per group.
inline constexpr int kMaxReduceDims = 8;

// (size, stride) of the kept and the reduced dims, outermost first, with
// size-1 axes dropped. Passed by value to kernels.
struct ReduceLayout {
  int kept_rank = 0, reduced_rank = 0;
  int64_t kept_sizes[kMaxReduceDims], kept_strides[kMaxReduceDims];
  int64_t reduced_sizes[kMaxReduceDims], reduced_strides[kMaxReduceDims];
  int64_t num_kept = 1, num_reduced = 1;
  // Note [Column blocks].
  unsigned columns_per_block = 1, threads_per_column = 1;

  dim3 block() const { return dim3(columns_per_block, threads_per_column); }
  dim3 grid() const {
    return dim3(static_cast<unsigned>(std::clamp<int64_t>(
        (num_kept + columns_per_block - 1) / columns_per_block, 1, kMaxBlocks)));
  }

  // The offset of column `index`'s first element.
  __device__ int64_t kept_offset(int64_t index) const {
    return offset_of(index, kept_rank, kept_sizes, kept_strides);
  }
  // The offset of the r-th element of a column from its first.
  __device__ int64_t reduced_offset(int64_t r) const {
    return offset_of(r, reduced_rank, reduced_sizes, reduced_strides);
  }

 private:
  // Unrolled over the fixed bound so the arrays stay in kernel parameters.
  // The outermost dim needs no division (what is left of the index is its
  // coordinate), so a single dim costs one multiply.
  __device__ static int64_t offset_of(int64_t index, int rank, const int64_t* sizes,
                                      const int64_t* strides) {
    int64_t offset = 0;
#pragma unroll
    for (int d = kMaxReduceDims - 1; d > 0; --d) {
      if (d < rank) {
        const int64_t rest = index / sizes[d];
        offset += (index - rest * sizes[d]) * strides[d];
        index = rest;
      }
    }
    return rank > 0 ? offset + index * strides[0] : 0;
  }
};

// The layout of a contiguous tensor of shape `dims` reduced over `axes`
// (normalized, sorted, unique).
inline ReduceLayout make_reduce_layout(absl::Span<const int64_t> dims, absl::Span<const int> axes) {
  ReduceLayout l;
  bool innermost_reduced = false;
  int64_t stride = 1;
  // Innermost first, so a dim merges into the previous one of its group when
  // that one ends exactly where this one's stride begins.
  for (int axis = static_cast<int>(dims.size()) - 1; axis >= 0; --axis) {
    const int64_t size = dims[axis];
    if (size != 1) {
      const bool reduced = std::binary_search(axes.begin(), axes.end(), axis);
      if (stride == 1) innermost_reduced = reduced;
      int& rank = reduced ? l.reduced_rank : l.kept_rank;
      int64_t* sizes = reduced ? l.reduced_sizes : l.kept_sizes;
      int64_t* strides = reduced ? l.reduced_strides : l.kept_strides;
      (reduced ? l.num_reduced : l.num_kept) *= size;
      if (rank > 0 && strides[rank - 1] * sizes[rank - 1] == stride) {
        sizes[rank - 1] *= size;
      } else {
        TANDEM_CHECK(
            rank < kMaxReduceDims, "a reduction on the GPU handles at most ", kMaxReduceDims,
            " separate runs of kept or reduced axes, got more in a tensor of rank ", dims.size());
        sizes[rank] = size;
        strides[rank] = stride;
        ++rank;
      }
    }
    stride *= size;
  }
  std::reverse(l.kept_sizes, l.kept_sizes + l.kept_rank);
  std::reverse(l.kept_strides, l.kept_strides + l.kept_rank);
  std::reverse(l.reduced_sizes, l.reduced_sizes + l.reduced_rank);
  std::reverse(l.reduced_strides, l.reduced_strides + l.reduced_rank);

  auto pow2_up_to = [](int64_t n, int64_t limit) {
    return static_cast<unsigned>(
        std::bit_ceil(static_cast<uint64_t>(std::clamp<int64_t>(n, 1, limit))));
  };
  const int64_t column_limit = innermost_reduced ? 1 : 32;
  l.threads_per_column = std::min(kThreadsPerBlock / pow2_up_to(l.num_kept, column_limit),
                                  pow2_up_to(l.num_reduced, kThreadsPerBlock));
  l.columns_per_block = kThreadsPerBlock / l.threads_per_column;
  return l;
}

// The column a thread works on. Threads past the last column take part in
// the block's folds (every thread must) but read and write nothing.
struct Column {
  int64_t index = 0;
  int64_t base = 0;  // Offset of its first element.
  bool active = false;
};

// Calls body(column) for each group of blockDim.x columns the block covers
// (a grid-stride loop). The loop condition is the same for the whole block,
// so body may use column_reduce.
template <class Body>
__device__ void for_each_column(const ReduceLayout& l, Body body) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x; first < l.num_kept;
       first += step) {
    Column col;
    col.index = first + threadIdx.x;
    col.active = col.index < l.num_kept;
    col.base = col.active ? l.kept_offset(col.index) : 0;
    body(col);
  }
}

// Calls f(offset, r) for this thread's share of the column's elements, or
// of those with r in [begin, end).
template <class F>
__device__ void for_each_reduced(const ReduceLayout& l, const Column& col, F f, int64_t begin = 0,
                                 int64_t end = std::numeric_limits<int64_t>::max()) {
  if (!col.active) return;
  if (end > l.num_reduced) end = l.num_reduced;
    // Unrolled so that a thread has several loads in flight.
#pragma unroll 4
  for (int64_t r = begin + threadIdx.y; r < end; r += blockDim.y) {
    f(col.base + l.reduced_offset(r), r);
  }
}

// The fold of op over the column (or its elements [begin, end)), returned
// to every thread of the column. Every thread of the block must call it.
template <class Op>
__device__ typename Op::Acc column_reduce(const ReduceLayout& l, const Column& col, const Op& op,
                                          int64_t begin = 0,
                                          int64_t end = std::numeric_limits<int64_t>::max()) {
  using Acc = typename Op::Acc;
  __shared__ Acc shares[kThreadsPerBlock];
  Acc acc = op.identity();
  for_each_reduced(
      l, col, [&](int64_t offset, int64_t r) { acc = op.combine(acc, op.map(offset, r)); }, begin,
      end);
  const unsigned tid = threadIdx.y * blockDim.x + threadIdx.x;
  shares[tid] = acc;
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) shares[tid] = op.combine(shares[tid], shares[tid + half * blockDim.x]);
    __syncthreads();
  }
  const Acc result = shares[threadIdx.x];
  __syncthreads();  // Before the next fold overwrites the shares.
  return result;
}

// Floating types accumulate in double, integers in int64, as on the CPU.
template <class T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T>
struct SumOf {
  using Acc = Accumulator<T>;
  const T* in;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(int64_t offset, int64_t) const { return static_cast<Acc>(in[offset]); }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

// The sum of (x - center)^2: the second pass of a two-pass variance.
template <class T>
struct SquaredDeviationOf {
  using Acc = double;
  const T* in;
  double center;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(int64_t offset, int64_t) const {
    const double d = static_cast<double>(in[offset]) - center;
    return d * d;
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

// The largest (kMax) or smallest value; a NaN wins, as in NumPy.
template <class T, bool kMax>
struct ExtremumOf {
  using Acc = T;
  const T* in;
  __device__ Acc identity() const {
    if constexpr (std::is_floating_point_v<T>) {
      return kMax ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::infinity();
    } else {
      return kMax ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
    }
  }
  __device__ Acc map(int64_t offset, int64_t) const { return in[offset]; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a != a) return a;
    if (b != b) return b;
    return (kMax ? b > a : b < a) ? b : a;
  }
};

// The total of a column as T, or its mean when `mean` is set.
template <class T>
struct Total {
  bool mean = false;
  template <class Acc>
  __device__ T operator()(Acc acc, int64_t count) const {
    if (mean) return static_cast<T>(static_cast<double>(acc) / static_cast<double>(count));
    return static_cast<T>(acc);
  }
};

// out[column] = finish(fold of op over the column, count).
template <class Op, class Finish, class Out>
__global__ void reduce_kernel(ReduceLayout l, Op op, Finish finish, int64_t count, Out* out) {
  for_each_column(l, [&](const Column& col) {
    const typename Op::Acc acc = column_reduce(l, col, op);
    if (col.active && threadIdx.y == 0) out[col.index] = finish(acc, count);
  });
}

// Note [Split columns]
// With few columns, a block per column leaves most of the GPU idle (a sum of
// everything is one column). launch_reduce then also cuts each column into
// chunks of at least kMinChunk elements, one per blockIdx.y, folds each into
// a partial accumulator in scratch memory, and folds the partials of each
// column in a second launch. The order stays fixed, so results stay
// deterministic.
inline constexpr int64_t kMinChunk = 16384;
inline constexpr int64_t kSplitTargetBlocks = 1024;

// partials[column * gridDim.y + blockIdx.y] = fold of chunk blockIdx.y.
template <class Op>
__global__ void partial_reduce_kernel(ReduceLayout l, Op op, int64_t chunk,
                                      typename Op::Acc* partials) {
  const int64_t begin = blockIdx.y * chunk;
  for_each_column(l, [&](const Column& col) {
    const typename Op::Acc acc = column_reduce(l, col, op, begin, begin + chunk);
    if (col.active && threadIdx.y == 0) partials[col.index * gridDim.y + blockIdx.y] = acc;
  });
}

// Folds partial accumulators of op.
template <class Op>
struct PartialsOf {
  using Acc = typename Op::Acc;
  Op op;
  const Acc* partials;
  __device__ Acc identity() const { return op.identity(); }
  __device__ Acc map(int64_t offset, int64_t) const { return partials[offset]; }
  __device__ Acc combine(Acc a, Acc b) const { return op.combine(a, b); }
};

// out[column] = finish(fold of op over the column, elements per column), on
// the op's stream; no launch when there are no columns.
template <class Op, class Finish, class Out>
void launch_reduce(const KernelContext& c, const ReduceLayout& l, Op op, Finish finish, Out* out) {
  if (l.num_kept == 0) return;
  const cudaStream_t stream = stream_of(c);
  const int64_t column_blocks = l.grid().x;
  const int64_t splits = std::min({(l.num_reduced + kMinChunk - 1) / kMinChunk,
                                   kSplitTargetBlocks / column_blocks, int64_t{65535}});
  if (splits < 2) {
    reduce_kernel<<<l.grid(), l.block(), 0, stream>>>(l, op, finish, l.num_reduced, out);
    TANDEM_CUDA_CHECK_LAUNCH();
    return;
  }
  using Acc = typename Op::Acc;
  // Kept alive until both launches are enqueued: the allocator reuses blocks
  // in stream order.
  const Tensor scratch = Tensor::empty(
      Shape{l.num_kept * splits * static_cast<int64_t>(sizeof(Acc))}, DType::kUInt8, c.run.device);
  Acc* partials = reinterpret_cast<Acc*>(scratch.data<uint8_t>());
  const int64_t chunk = (l.num_reduced + splits - 1) / splits;
  partial_reduce_kernel<<<dim3(l.grid().x, static_cast<unsigned>(splits)), l.block(), 0, stream>>>(
      l, op, chunk, partials);
  TANDEM_CUDA_CHECK_LAUNCH();
  const int64_t dims[] = {l.num_kept, splits};
  const int axes[] = {1};
  const ReduceLayout by_column = make_reduce_layout(dims, axes);
  reduce_kernel<<<by_column.grid(), by_column.block(), 0, stream>>>(
      by_column, PartialsOf<Op>{op, partials}, finish, l.num_reduced, out);
  TANDEM_CUDA_CHECK_LAUNCH();
}

}  // namespace tandem::kernels::cuda
