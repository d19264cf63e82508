// The CUDA kernels of kernels/ops/indexing.cc: gather, scatter, scatter_add,
// gather_nd, scatter_nd_add and one_hot. One thread per index (or per output
// element), moving elements as unsigned integers of their size where no
// arithmetic is done. Indices out of range select nothing (Note [Indices out
// of range on the GPU] in indexing.cuh). The scatters write in whatever
// order the threads land: scatter's repeated positions keep one of their
// writes, and scatter_add's float sums may differ from the CPU's in the
// last bits.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/element_types.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/indexing.cuh"

namespace tandem::kernels {
namespace cuda {
namespace {

void copy_into(const Tensor& out, const Tensor& x, cudaStream_t stream) {
  if (out.nbytes() == 0) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), x.raw_data(), out.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream));
}

// Where element i of the indices points in x (contiguous): base(i) is its
// own position's offset without the axis coordinate, to which the resolved
// index adds index * axis_stride.
struct ElementwiseLayout {
  Indexer<1> base;
  int64_t axis_stride;
  int64_t axis_size;

  ElementwiseLayout(const Shape& indices, const Shape& x, int axis)
      : axis_stride(x.stride(axis)), axis_size(x[axis]) {
    Strides strides = contiguous_strides(x);
    strides[axis] = 0;
    base = make_indexer<1>(indices, {strides});
  }
  // The offset in x for element i with index `index`, or -1 when the index
  // is out of range.
  __device__ __forceinline__ int64_t operator()(int64_t i, int64_t index) const {
    index = resolve_index(index, axis_size);
    return in_range(index, axis_size) ? base(i).at[0] + index * axis_stride : -1;
  }
};

ElementwiseLayout elementwise_layout(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  return ElementwiseLayout(c.inputs[1].shape(), x.shape(),
                           x.shape().normalize_axis(c.attrs.get_int("axis")));
}

template <class U>
struct Gather {
  const U* x;
  const int64_t* indices;
  U* out;
  ElementwiseLayout at;
  __device__ void operator()(int64_t i) const {
    const int64_t from = at(i, indices[i]);
    out[i] = from >= 0 ? x[from] : U{};
  }
};

void gather_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  visit_element_bits(dtype_size(x.dtype()), [&]<class U>() {
    for_each(stream_of(c), c.outputs[0].numel(),
             Gather<U>{static_cast<const U*>(x.raw_data()), c.inputs[1].data<int64_t>(),
                       static_cast<U*>(c.outputs[0].raw_data()), elementwise_layout(c)});
  });
}

template <class U>
struct Scatter {
  U* out;
  const int64_t* indices;
  const U* src;
  ElementwiseLayout at;
  __device__ void operator()(int64_t i) const {
    const int64_t to = at(i, indices[i]);
    if (to >= 0) out[to] = src[i];
  }
};

void scatter_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  copy_into(out, c.inputs[0], stream_of(c));
  visit_element_bits(dtype_size(out.dtype()), [&]<class U>() {
    for_each(stream_of(c), c.inputs[1].numel(),
             Scatter<U>{static_cast<U*>(out.raw_data()), c.inputs[1].data<int64_t>(),
                        static_cast<const U*>(c.inputs[2].raw_data()), elementwise_layout(c)});
  });
}

template <class T>
struct ScatterAdd {
  T* out;
  const int64_t* indices;
  const T* src;
  ElementwiseLayout at;
  __device__ void operator()(int64_t i) const {
    const int64_t to = at(i, indices[i]);
    if (to >= 0) atomic_add(out + to, src[i]);
  }
};

void scatter_add_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  copy_into(out, c.inputs[0], stream_of(c));
  visit_numeric(out.dtype(), [&]<class T>() {
    for_each(stream_of(c), c.inputs[1].numel(),
             ScatterAdd<T>{out.data<T>(), c.inputs[1].data<int64_t>(), c.inputs[2].data<T>(),
                           elementwise_layout(c)});
  });
}

// gather_nd and scatter_nd_add: data as [batches, indexed (k axes), slice],
// indices as [batches, rows, k]; inference has checked the shapes.
struct TupleLayout {
  static constexpr int kMaxTuple = 8;  // Tandem's tensors have rank <= 8.
  int k = 0;
  int64_t rows = 1, slice = 1, per_batch = 1;
  int64_t sizes[kMaxTuple] = {};  // Of the indexed axes.

  TupleLayout(const Shape& data, const Shape& indices, int batch_dims) {
    k = static_cast<int>(indices[indices.rank() - 1]);
    TANDEM_CHECK(k <= kMaxTuple, "index tuples of ", k, " entries; the CUDA kernels take at most ",
                 kMaxTuple);
    for (int a = batch_dims; a < indices.rank() - 1; ++a) rows *= indices[a];
    for (int j = 0; j < k; ++j) sizes[j] = data[batch_dims + j];
    for (int a = batch_dims + k; a < data.rank(); ++a) slice *= data[a];
    for (int a = batch_dims; a < data.rank(); ++a) per_batch *= data[a];
  }
  // The offset in data of element s of the slice index tuple `row` selects,
  // or -1 when an entry is out of range.
  __device__ __forceinline__ int64_t operator()(const int64_t* indices, int64_t row,
                                                int64_t s) const {
    int64_t at = 0;
    for (int j = 0; j < k; ++j) {
      const int64_t index = resolve_index(indices[row * k + j], sizes[j]);
      if (!in_range(index, sizes[j])) return -1;
      at = at * sizes[j] + index;
    }
    return (row / rows) * per_batch + at * slice + s;
  }
};

TupleLayout tuple_layout(const KernelContext& c) {
  return TupleLayout(c.inputs[0].shape(), c.inputs[1].shape(),
                     static_cast<int>(c.attrs.get_int("batch_dims")));
}

template <class U>
struct GatherNd {
  const U* data;
  const int64_t* indices;
  U* out;
  TupleLayout at;
  __device__ void operator()(int64_t i) const {
    const int64_t row = i / at.slice;
    const int64_t from = at(indices, row, i - row * at.slice);
    out[i] = from >= 0 ? data[from] : U{};
  }
};

void gather_nd_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  visit_element_bits(dtype_size(out.dtype()), [&]<class U>() {
    for_each(stream_of(c), out.numel(),
             GatherNd<U>{static_cast<const U*>(c.inputs[0].raw_data()), c.inputs[1].data<int64_t>(),
                         static_cast<U*>(out.raw_data()), tuple_layout(c)});
  });
}

template <class T>
struct ScatterNdAdd {
  T* out;
  const int64_t* indices;
  const T* updates;
  TupleLayout at;
  __device__ void operator()(int64_t i) const {
    const int64_t row = i / at.slice;
    const int64_t to = at(indices, row, i - row * at.slice);
    if (to >= 0) atomic_add(out + to, updates[i]);
  }
};

void scatter_nd_add_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  copy_into(out, c.inputs[0], stream_of(c));
  if (c.inputs[2].numel() == 0) return;
  visit_numeric(out.dtype(), [&]<class T>() {
    for_each(stream_of(c), c.inputs[2].numel(),
             ScatterNdAdd<T>{out.data<T>(), c.inputs[1].data<int64_t>(), c.inputs[2].data<T>(),
                             tuple_layout(c)});
  });
}

template <class U>
struct OneHot {
  const int64_t* indices;
  U* out;
  int64_t classes;
  U one;
  __device__ void operator()(int64_t i) const {
    const int64_t row = i / classes;
    out[i] = resolve_index(indices[row], classes) == i - row * classes ? one : U{};
  }
};

void one_hot_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  with_value_bits(out.dtype(), 1.0, [&]<class U>(U one) {
    for_each(stream_of(c), out.numel(),
             OneHot<U>{c.inputs[0].data<int64_t>(), static_cast<U*>(out.raw_data()),
                       c.attrs.get_int("num_classes"), one});
  });
}

}  // namespace
}  // namespace cuda

void register_indexing_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("gather", cuda::gather_kernel);
  registry.set_cuda_kernel("scatter", cuda::scatter_kernel);
  registry.set_cuda_kernel("scatter_add", cuda::scatter_add_kernel);
  registry.set_cuda_kernel("gather_nd", cuda::gather_nd_kernel);
  registry.set_cuda_kernel("scatter_nd_add", cuda::scatter_nd_add_kernel);
  registry.set_cuda_kernel("one_hot", cuda::one_hot_kernel);
}

}  // namespace tandem::kernels
