// The CUDA kernels of the shape ops (kernels/ops/shape.cc). As on the CPU,
// every op writes a fresh contiguous output, and all but index_add's sum
// move bytes without looking at the dtype. Attributes were
// checked by inference; the helpers here only resolve them (negative axes,
// Python slice bounds) the same way.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/element_types.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/indexing.cuh"

namespace tandem::kernels {
namespace cuda {
namespace {

using Ints = std::vector<int64_t>;

int resolve_axis(int64_t axis, int rank) { return static_cast<int>(axis < 0 ? axis + rank : axis); }

// Elements of a contiguous tensor of `shape` in axes [begin, end).
int64_t product(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int axis = begin; axis < end; ++axis) n *= shape[axis];
  return n;
}

// The widest of 16, 8, 4, 2 and 1 bytes that divides every value: a copy
// unit that keeps every access aligned.
size_t widest_unit(std::initializer_list<uint64_t> values) {
  size_t unit = 16;
  for (uint64_t value : values) {
    while (value % unit != 0) unit /= 2;
  }
  return unit;
}

// Calls f.template operator()<U>() with an integer type of `unit` bytes.
template <class F>
void visit_unit(size_t unit, F&& f) {
  switch (unit) {
    case 16:
      return f.template operator()<uint4>();
    case 8:
      return f.template operator()<uint64_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 2:
      return f.template operator()<uint16_t>();
    default:
      return f.template operator()<uint8_t>();
  }
}

uint64_t address(const void* p) { return reinterpret_cast<uint64_t>(p); }

template <class U>
struct StridedCopy {
  U* dst;
  const U* src;
  Indexer<2> ix;  // Operand 0: dst, 1: src.
  __device__ void operator()(int64_t i) const {
    Offsets<2> o = ix(i);
    dst[o.at[0]] = src[o.at[1]];
  }
};

// A strided copy as the kernel runs it: `n` units of `unit` bytes, unit i
// from offset ix(i).at[1] of the source to ix(i).at[0] of the destination
// (in units).
//
// Note [Strided byte copy]: the copy runs in bytes, with the bytes of an
// element as one more innermost axis, so that merging axes (Note [Merged
// axes] in for_each.cuh) joins contiguous runs across elements; each thread
// then moves the widest unit (up to 16 bytes) that divides the innermost run,
// every other step and both addresses. Concatenating float rows of 4 floats
// moves one 16-byte unit per row; a transpose moves one element per thread.
struct CopyPlan {
  Indexer<2> ix;
  size_t unit = 1;
  int64_t n = 0;
};

CopyPlan plan_copy(void* dst, const Strides& dst_strides, const void* src,
                   const Strides& src_strides, const Shape& shape, size_t element) {
  const int64_t bytes = static_cast<int64_t>(element);
  Shape::Dims dims(shape.begin(), shape.end());
  Strides dst_bytes(dst_strides), src_bytes(src_strides);
  for (int64_t& stride : dst_bytes) stride *= bytes;
  for (int64_t& stride : src_bytes) stride *= bytes;
  dims.push_back(bytes);
  dst_bytes.push_back(1);
  src_bytes.push_back(1);
  CopyPlan plan{.ix = make_indexer<2>(Shape(dims), {dst_bytes, src_bytes})};
  Indexer<2>& ix = plan.ix;
  if (ix.rank > 0 && ix.strides[0][0] == 1 && ix.strides[0][1] == 1) {
    plan.unit = widest_unit({static_cast<uint64_t>(ix.sizes[0]), address(dst), address(src)});
    for (int axis = 1; axis < ix.rank; ++axis) {
      plan.unit = std::min(plan.unit, widest_unit({static_cast<uint64_t>(ix.strides[axis][0]),
                                                   static_cast<uint64_t>(ix.strides[axis][1])}));
    }
    const int64_t unit = static_cast<int64_t>(plan.unit);
    ix.sizes[0] /= unit;
    for (int axis = 1; axis < ix.rank; ++axis) {
      for (int64_t& stride : ix.strides[axis]) stride /= unit;
    }
  }
  plan.n = 1;
  for (int axis = 0; axis < ix.rank; ++axis) plan.n *= ix.sizes[axis];
  return plan;
}

// Copies the elements of `shape` (each `element` bytes) from `src` to `dst`,
// stepping `src_strides` and `dst_strides` elements along each axis: the one
// kernel behind transpose, expand, concat, stack, split, slice and pad.
void copy_strided(cudaStream_t stream, void* dst, const Strides& dst_strides, const void* src,
                  const Strides& src_strides, const Shape& shape, size_t element) {
  if (shape.numel() == 0) return;
  CopyPlan plan = plan_copy(dst, dst_strides, src, src_strides, shape, element);
  visit_unit(plan.unit, [&]<class U>() {
    for_each(stream, plan.n,
             StridedCopy<U>{static_cast<U*>(dst), static_cast<const U*>(src), plan.ix});
  });
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// reshape, flatten: the bytes as they are.
void copy_kernel(const KernelContext& c) {
  if (c.inputs[0].nbytes() == 0) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(c.outputs[0].raw_data(), c.inputs[0].raw_data(),
                                    c.inputs[0].nbytes(), cudaMemcpyDeviceToDevice, stream_of(c)));
}

void transpose_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Ints& perm = c.attrs.get_ints("perm");
  int rank = x.rank();
  Strides from(rank);  // The input's stride along each output axis.
  for (int i = 0; i < rank; ++i) {
    int axis = perm.empty() ? rank - 1 - i : resolve_axis(perm[i], rank);  // Empty: reversed.
    from[i] = x.shape().stride(axis);
  }
  copy_strided(stream_of(c), out.raw_data(), contiguous_strides(out.shape()), x.raw_data(), from,
               out.shape(), dtype_size(x.dtype()));
}

void expand_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  copy_strided(stream_of(c), out.raw_data(), contiguous_strides(out.shape()), x.raw_data(),
               broadcast_strides(x.shape(), out.shape()), out.shape(), dtype_size(x.dtype()));
}

// concat, stack and split: `whole` is, along `axis`, the pieces one after
// another, piece k taking rows[k] rows. `gather` copies the pieces into
// `whole`, else `whole` into the pieces.
void move_chunks(cudaStream_t stream, const Tensor& whole, absl::Span<const Tensor> pieces,
                 int axis, const Ints& rows, bool gather) {
  const Shape& shape = whole.shape();
  int64_t outer = product(shape, 0, axis), inner = product(shape, axis + 1, shape.rank());
  Strides whole_strides = {shape[axis] * inner, inner, 1};
  int64_t row = 0;
  for (size_t k = 0; k < pieces.size(); row += rows[k], ++k) {
    Strides piece_strides = {rows[k] * inner, inner, 1};
    char* at = bytes_of(whole) + row * inner * dtype_size(whole.dtype());
    char* piece = bytes_of(pieces[k]);
    copy_strided(stream, gather ? at : piece, gather ? whole_strides : piece_strides,
                 gather ? piece : at, gather ? piece_strides : whole_strides,
                 Shape{outer, rows[k], inner}, dtype_size(whole.dtype()));
  }
}

void concat_kernel(const KernelContext& c) {
  int axis = resolve_axis(c.attrs.get_int("axis"), c.outputs[0].rank());
  Ints rows;
  for (const Tensor& t : c.inputs) rows.push_back(t.shape()[axis]);
  move_chunks(stream_of(c), c.outputs[0], c.inputs, axis, rows, /*gather=*/true);
}

void stack_kernel(const KernelContext& c) {
  int axis = resolve_axis(c.attrs.get_int("axis"), c.outputs[0].rank());
  move_chunks(stream_of(c), c.outputs[0], c.inputs, axis, Ints(c.inputs.size(), 1),
              /*gather=*/true);
}

void split_kernel(const KernelContext& c) {
  int axis = resolve_axis(c.attrs.get_int("axis"), c.inputs[0].rank());
  move_chunks(stream_of(c), c.inputs[0], c.outputs, axis, c.attrs.get_ints("sizes"),
              /*gather=*/false);
}

// slice and slice_backward: rows begin, begin + step, ... (count of them) of
// `full` along the axis, against the contiguous `part`. Bounds are clamped
// as in Python, like resolve_slice in shape.cc.
void move_strided_rows(cudaStream_t stream, const Tensor& full, const Tensor& part,
                       const Attrs& attrs, bool scatter) {
  const Shape& shape = full.shape();
  int axis = resolve_axis(attrs.get_int("axis"), shape.rank());
  int64_t dim = shape[axis], step = attrs.get_int("step");
  auto clamp = [dim](int64_t i) {
    if (i < 0) i = std::max<int64_t>(i, -dim) + dim;
    return std::min(i, dim);
  };
  int64_t begin = clamp(attrs.get_int("begin")), end = clamp(attrs.get_int("end"));
  int64_t count = end > begin ? (end - begin - 1) / step + 1 : 0;
  int64_t outer = product(shape, 0, axis), inner = product(shape, axis + 1, shape.rank());
  // With two rows or more, step < dim, so step * inner fits; a single row
  // takes no step (step may be as large as INT64_MAX).
  const int64_t row_step = count > 1 ? step : 1;
  Strides full_strides = {dim * inner, row_step * inner, 1},
          part_strides = {count * inner, inner, 1};
  char* at = bytes_of(full) + begin * inner * dtype_size(full.dtype());
  copy_strided(stream, scatter ? at : bytes_of(part), scatter ? full_strides : part_strides,
               scatter ? bytes_of(part) : at, scatter ? part_strides : full_strides,
               Shape{outer, count, inner}, dtype_size(full.dtype()));
}

void slice_kernel(const KernelContext& c) {
  move_strided_rows(stream_of(c), c.inputs[0], c.outputs[0], c.attrs, /*scatter=*/false);
}

void slice_backward_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  if (out.nbytes() > 0) {  // Zero bits are zero in every dtype.
    TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream_of(c)));
  }
  move_strided_rows(stream_of(c), out, c.inputs[0], c.attrs, /*scatter=*/true);
}

// take, embedding and index_add: index j of `indices` selects row
// indices[j] of the axis, counting from the end when negative (take and
// index_add; for embedding a negative index is out of range).
//
// (Note [Indices out of range on the GPU] in indexing.cuh.)

// out[o, j, r] = x[o, indices[j], r], in units of U per row of `row` units.
template <class U>
struct TakeRows {
  const U* x;
  const int64_t* indices;
  U* out;
  int64_t count, dim, row;
  bool from_end;  // Whether a negative index counts from the end.
  __device__ void operator()(int64_t i) const {
    int64_t rest = i / row, r = i - rest * row;
    int64_t o = rest / count, j = rest - o * count;
    int64_t index = from_end ? resolve_index(indices[j], dim) : indices[j];
    out[i] = index >= 0 && index < dim ? x[(o * dim + index) * row + r] : U{};
  }
};

void take_rows(const KernelContext& c, int axis, bool from_end) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Shape& shape = x.shape();
  uint64_t row_bytes = product(shape, axis + 1, shape.rank()) * dtype_size(x.dtype());
  if (out.numel() == 0) return;
  size_t unit = widest_unit({row_bytes, address(x.raw_data()), address(out.raw_data())});
  visit_unit(unit, [&]<class U>() {
    for_each(stream_of(c), static_cast<int64_t>(out.nbytes() / unit),
             TakeRows<U>{static_cast<const U*>(x.raw_data()), c.inputs[1].data<int64_t>(),
                         static_cast<U*>(out.raw_data()), c.inputs[1].numel(), shape[axis],
                         static_cast<int64_t>(row_bytes / unit), from_end});
  });
}

void take_kernel(const KernelContext& c) {
  take_rows(c, resolve_axis(c.attrs.get_int("axis"), c.inputs[0].rank()), /*from_end=*/true);
}

void embedding_kernel(const KernelContext& c) { take_rows(c, 0, /*from_end=*/false); }

// out[o, indices[j], r] += src[o, j, r] for every element of src.
template <class T>
struct IndexAdd {
  T* out;
  const int64_t* indices;
  const T* src;
  int64_t count, dim, inner;
  __device__ void operator()(int64_t i) const {
    int64_t rest = i / inner, r = i - rest * inner;
    int64_t o = rest / count, j = rest - o * count;
    int64_t index = resolve_index(indices[j], dim);
    if (index >= 0 && index < dim) atomic_add(out + (o * dim + index) * inner + r, src[i]);
  }
};

// Repeated indices add in whatever order the atomics land: float sums may
// differ from the CPU's in the last bits, and from run to run.
void index_add_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Tensor& src = c.inputs[2];
  if (out.nbytes() > 0) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(out.raw_data(), x.raw_data(), out.nbytes(),
                                      cudaMemcpyDeviceToDevice, stream_of(c)));
  }
  int axis = resolve_axis(c.attrs.get_int("axis"), x.rank());
  int64_t inner = product(x.shape(), axis + 1, x.rank());
  if (src.numel() == 0) return;
  visit_numeric(x.dtype(), [&]<class T>() {
    for_each(stream_of(c), src.numel(),
             IndexAdd<T>{out.data<T>(), c.inputs[1].data<int64_t>(), src.data<T>(),
                         c.inputs[1].numel(), x.shape()[axis], inner});
  });
}

}  // namespace
}  // namespace cuda

void register_shape_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("reshape", cuda::copy_kernel);
  registry.set_cuda_kernel("flatten", cuda::copy_kernel);
  registry.set_cuda_kernel("transpose", cuda::transpose_kernel);
  registry.set_cuda_kernel("concat", cuda::concat_kernel);
  registry.set_cuda_kernel("stack", cuda::stack_kernel);
  registry.set_cuda_kernel("split", cuda::split_kernel);
  registry.set_cuda_kernel("slice", cuda::slice_kernel);
  registry.set_cuda_kernel("slice_backward", cuda::slice_backward_kernel);
  registry.set_cuda_kernel("take", cuda::take_kernel);
  registry.set_cuda_kernel("embedding", cuda::embedding_kernel);
  registry.set_cuda_kernel("index_add", cuda::index_add_kernel);
  registry.set_cuda_kernel("expand", cuda::expand_kernel);
}

}  // namespace tandem::kernels
