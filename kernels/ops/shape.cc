// Shape ops: reshape, flatten, transpose, concat, stack, split, slice, take,
// embedding, expand; and the two scatters their gradients use,
// slice_backward and index_add (pad is padding.cc). Every kernel copies into
// a fresh contiguous output (the engine cannot alias outputs yet), so they
// move bytes without caring about the dtype, except where values are added
// (index_add).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

using Ints = std::vector<int64_t>;

// Helpers.

int64_t product(absl::Span<const int64_t> dims) {
  return std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<>());
}

// Elements before and after `axis` in a contiguous tensor of `shape`.
int64_t outer_size(const Shape& shape, int axis) { return product(shape.dims().subspan(0, axis)); }
int64_t inner_size(const Shape& shape, int axis) { return product(shape.dims().subspan(axis + 1)); }

Ints dims_of(const Shape& shape) { return Ints(shape.begin(), shape.end()); }

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

// The whole input, unchanged, into the output (reshape, flatten).
void copy_kernel(const KernelContext& c) {
  if (c.inputs[0].nbytes() == 0) return;
  std::memcpy(c.outputs[0].raw_data(), c.inputs[0].raw_data(), c.inputs[0].nbytes());
}

// Tensors of `shape` whose chunks along `axis` come one after another:
// out[o, pieces...] with piece k taking sizes[k] rows. concat, stack and
// split move data between such chunked layouts.
// `gather` = true copies pieces into `whole`, false copies `whole` into pieces.
void move_chunks(const Tensor& whole, absl::Span<const Tensor> pieces, int axis,
                 const Ints& rows_per_piece, int64_t inner, bool gather) {
  size_t element = dtype_size(whole.dtype());
  int64_t outer = outer_size(whole.shape(), axis);
  int64_t whole_rows = whole.shape()[axis];
  char* base = bytes_of(whole);
  for (size_t k = 0, row = 0; k < pieces.size(); row += rows_per_piece[k], ++k) {
    size_t chunk = static_cast<size_t>(rows_per_piece[k] * inner) * element;
    if (chunk == 0) continue;
    char* piece = bytes_of(pieces[k]);
    for (int64_t o = 0; o < outer; ++o) {
      char* at = base + static_cast<size_t>((o * whole_rows + static_cast<int64_t>(row)) * inner) *
                            element;
      char* other = piece + static_cast<size_t>(o) * chunk;
      if (gather) {
        std::memcpy(at, other, chunk);
      } else {
        std::memcpy(other, at, chunk);
      }
    }
  }
}

// reshape: one -1 allowed; messages as Tensor::reshape's.

Shape resolve_reshape(const Shape& from, const Ints& dims) {
  Shape::Dims resolved(dims.begin(), dims.end());
  int inferred = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(resolved.size()); ++i) {
    if (resolved[i] == -1) {
      TANDEM_CHECK(inferred < 0, "only one dimension may be -1, got two in reshape of ",
                   from.to_string(), " to ", ints_to_string(dims));
      inferred = i;
    } else {
      TANDEM_CHECK(resolved[i] >= 0, "invalid dimension ", resolved[i], " at axis ", i,
                   " in reshape of ", from.to_string(), " to ", ints_to_string(dims));
      known = checked_mul(known, resolved[i], "reshape element count");
    }
  }
  if (inferred >= 0) {
    TANDEM_CHECK(known != 0 && from.numel() % known == 0, "cannot reshape ", from.to_string(), " (",
                 from.numel(), " elements) to ", ints_to_string(dims), ": ", from.numel(),
                 " is not a multiple of ", known);
    resolved[inferred] = from.numel() / known;
  }
  Shape target(resolved);
  TANDEM_CHECK(target.numel() == from.numel(), "cannot reshape ", from.to_string(), " (",
               from.numel(), " elements) to ", target.to_string(), " (", target.numel(),
               " elements)");
  return target;
}

TensorMetas infer_reshape(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  return {{resolve_reshape(in[0].shape, attrs.get_ints("shape")), in[0].dtype}};
}

Tensor reshape_to(const Tensor& t, const Shape& shape) {
  return nested_call1("reshape", {t}, {{"shape", dims_of(shape)}});
}

std::vector<Tensor> reshape_gradient(const GradContext& c) {
  return {reshape_to(c.grad_outputs[0], c.inputs[0].shape())};
}

// flatten: axes [start_axis, end_axis] become one; a scalar becomes [1].

TensorMetas infer_flatten(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const Shape& shape = in[0].shape;
  if (shape.rank() == 0) return {{Shape{1}, in[0].dtype}};
  int start = shape.normalize_axis(attrs.get_int("start_axis"));
  int end = shape.normalize_axis(attrs.get_int("end_axis"));
  TANDEM_CHECK(start <= end, "start_axis ", attrs.get_int("start_axis"), " comes after end_axis ",
               attrs.get_int("end_axis"), " for shape ", shape.to_string());
  Shape::Dims dims(shape.begin(), shape.begin() + start);
  dims.push_back(product(shape.dims().subspan(start, end - start + 1)));
  dims.insert(dims.end(), shape.begin() + end + 1, shape.end());
  return {{Shape(dims), in[0].dtype}};
}

// transpose: out.shape[i] = x.shape[perm[i]]; an empty perm reverses the axes.

Ints resolve_perm(const Shape& shape, const Ints& given) {
  int rank = shape.rank();
  if (given.empty()) {
    Ints perm(rank);
    for (int i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
    return perm;
  }
  TANDEM_CHECK(static_cast<int>(given.size()) == rank, "perm ", ints_to_string(given), " has ",
               given.size(), " entries but the input ", shape.to_string(), " has rank ", rank);
  Ints perm(rank);
  std::vector<bool> seen(rank, false);
  for (int i = 0; i < rank; ++i) {
    int axis = shape.normalize_axis(given[i]);
    TANDEM_CHECK(!seen[axis], "perm ", ints_to_string(given), " is not a permutation: axis ", axis,
                 " appears twice");
    seen[axis] = true;
    perm[i] = axis;
  }
  return perm;
}

TensorMetas infer_transpose(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  Ints perm = resolve_perm(in[0].shape, attrs.get_ints("perm"));
  Shape::Dims dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) dims[i] = in[0].shape[static_cast<int>(perm[i])];
  return {{Shape(dims), in[0].dtype}};
}

// out[i] = x[offset(i)], walking out's shape in row-major order with
// `strides[axis]` elements of x per step along each axis of out: a
// transpose (permuted strides) or a broadcast (zero strides).
void strided_copy(const Tensor& x, const Tensor& out, const Strides& strides) {
  const Shape& shape = out.shape();
  int rank = shape.rank();
  int64_t n = shape.numel();
  visit_element_bits(dtype_size(x.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(x.raw_data());
    U* dst = static_cast<U*>(out.raw_data());
    Strides index(rank, 0);
    int64_t offset = 0;
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = src[offset];
      for (int axis = rank - 1; axis >= 0; --axis) {
        offset += strides[axis];
        if (++index[axis] < shape[axis]) break;
        offset -= strides[axis] * shape[axis];
        index[axis] = 0;
      }
    }
  });
}

void transpose_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  Ints perm = resolve_perm(x.shape(), c.attrs.get_ints("perm"));
  int rank = out.shape().rank();
  Strides from(rank);  // Input stride along each output axis.
  for (int i = 0; i < rank; ++i) from[i] = x.shape().stride(static_cast<int>(perm[i]));
  strided_copy(x, out, from);
}

std::vector<Tensor> transpose_gradient(const GradContext& c) {
  Ints perm = resolve_perm(c.inputs[0].shape(), c.attrs.get_ints("perm"));
  Ints inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {nested_call1("transpose", {c.grad_outputs[0]}, {{"perm", inverse}})};
}

// concat: inputs of one dtype and rank, equal except along `axis`.

TensorMetas infer_concat(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(!in.empty(), "concat needs at least one tensor");
  const Shape& first = in[0].shape;
  TANDEM_CHECK(first.rank() > 0, "cannot concatenate scalars (rank 0); use stack");
  int axis = first.normalize_axis(attrs.get_int("axis"));
  Shape::Dims dims(first.begin(), first.end());
  dims[axis] = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const Shape& shape = in[k].shape;
    TANDEM_CHECK(in[k].dtype == in[0].dtype, "dtype mismatch: input ", k, " is ",
                 dtype_name(in[k].dtype), " but input 0 is ", dtype_name(in[0].dtype));
    TANDEM_CHECK(shape.rank() == first.rank(), "input ", k, " has shape ", shape.to_string(),
                 " of rank ", shape.rank(), " but input 0 has shape ", first.to_string());
    for (int i = 0; i < first.rank(); ++i) {
      TANDEM_CHECK(i == axis || shape[i] == first[i], "input ", k, " has shape ", shape.to_string(),
                   " but input 0 has shape ", first.to_string(), ": they differ at axis ", i, " (",
                   shape[i], " vs ", first[i], ") and only axis ", axis, " may differ");
    }
    dims[axis] = checked_add(dims[axis], shape[axis], "the concatenated size of axis ", axis,
                             " (inputs 0 to ", k, ")");
  }
  return {{Shape(dims), in[0].dtype}};
}

void concat_kernel(const KernelContext& c) {
  const Shape& shape = c.outputs[0].shape();
  int axis = shape.normalize_axis(c.attrs.get_int("axis"));
  Ints rows;
  for (const Tensor& t : c.inputs) rows.push_back(t.shape()[axis]);
  move_chunks(c.outputs[0], c.inputs, axis, rows, inner_size(shape, axis), /*gather=*/true);
}

std::vector<Tensor> split_along(const Tensor& t, int64_t axis, Ints sizes) {
  return nested_call("split", {t}, {{"axis", axis}, {"sizes", std::move(sizes)}});
}

std::vector<Tensor> concat_gradient(const GradContext& c) {
  int axis = c.inputs[0].shape().normalize_axis(c.attrs.get_int("axis"));
  Ints sizes;
  for (const Tensor& t : c.inputs) sizes.push_back(t.shape()[axis]);
  return split_along(c.grad_outputs[0], axis, std::move(sizes));
}

// stack: inputs of one shape and dtype, joined along a new axis.

int stack_axis(int64_t axis, const Shape& shape) {
  int rank = shape.rank() + 1;
  TANDEM_CHECK(axis >= -rank && axis < rank, "axis ", axis,
               " is out of range for stacking tensors of shape ", shape.to_string(),
               " (the result has rank ", rank, ")");
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

TensorMetas infer_stack(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const Shape& first = in[0].shape;
  int axis = stack_axis(attrs.get_int("axis"), first);
  for (size_t k = 1; k < in.size(); ++k) {
    TANDEM_CHECK(in[k].dtype == in[0].dtype, "dtype mismatch: input ", k, " is ",
                 dtype_name(in[k].dtype), " but input 0 is ", dtype_name(in[0].dtype));
    TANDEM_CHECK(in[k].shape == first, "input ", k, " has shape ", in[k].shape.to_string(),
                 " but input 0 has shape ", first.to_string(), "; stacked tensors must match");
  }
  Shape::Dims dims(first.begin(), first.end());
  dims.insert(dims.begin() + axis, static_cast<int64_t>(in.size()));
  return {{Shape(dims), in[0].dtype}};
}

void stack_kernel(const KernelContext& c) {
  const Shape& shape = c.outputs[0].shape();
  int axis = stack_axis(c.attrs.get_int("axis"), c.inputs[0].shape());
  Ints rows(c.inputs.size(), 1);
  move_chunks(c.outputs[0], c.inputs, axis, rows, inner_size(shape, axis), /*gather=*/true);
}

std::vector<Tensor> stack_gradient(const GradContext& c) {
  int axis = stack_axis(c.attrs.get_int("axis"), c.inputs[0].shape());
  std::vector<Tensor> grads = split_along(c.grad_outputs[0], axis, Ints(c.inputs.size(), 1));
  for (Tensor& g : grads) g = reshape_to(g, c.inputs[0].shape());
  return grads;
}

// split: one output per entry of `sizes`, which must add up to the axis.

TensorMetas infer_split(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const Shape& shape = in[0].shape;
  int axis = shape.normalize_axis(attrs.get_int("axis"));
  const Ints& sizes = attrs.get_ints("sizes");
  TANDEM_CHECK(!sizes.empty(), "sizes must not be empty");
  int64_t total = 0;
  TensorMetas out;
  for (int64_t size : sizes) {
    TANDEM_CHECK(size >= 0, "sizes ", ints_to_string(sizes), " has a negative entry ", size);
    TANDEM_CHECK(size <= shape[axis] - total, "sizes ", ints_to_string(sizes),
                 " add up to more than ", shape[axis], ", the size of axis ", axis, " of shape ",
                 shape.to_string());
    total += size;
    Shape::Dims dims(shape.begin(), shape.end());
    dims[axis] = size;
    out.push_back({Shape(dims), in[0].dtype});
  }
  TANDEM_CHECK(total == shape[axis], "sizes ", ints_to_string(sizes), " add up to ", total,
               " but axis ", axis, " of shape ", shape.to_string(), " has size ", shape[axis]);
  return out;
}

void split_kernel(const KernelContext& c) {
  const Shape& shape = c.inputs[0].shape();
  int axis = shape.normalize_axis(c.attrs.get_int("axis"));
  move_chunks(c.inputs[0], c.outputs, axis, c.attrs.get_ints("sizes"), inner_size(shape, axis),
              /*gather=*/false);
}

// Outputs without a gradient contribute zeros.
std::vector<Tensor> split_gradient(const GradContext& c) {
  std::vector<Tensor> pieces;
  bool any = false;
  for (size_t k = 0; k < c.outputs.size(); ++k) {
    const Tensor& g = c.grad_outputs[k];
    any = any || g.defined();
    pieces.push_back(g.defined() ? g : zeros_like(c.outputs[k]));
  }
  if (!any) return {Tensor()};
  return {nested_call1("concat", pieces, {{"axis", c.attrs.get_int("axis")}})};
}

// slice: x[begin:end:step] along `axis`, bounds clamped as in Python.

struct SliceRange {
  int axis;
  int64_t begin, step, count;
};

SliceRange resolve_slice(const Shape& shape, const Attrs& attrs) {
  TANDEM_CHECK(shape.rank() > 0, "cannot slice a scalar (rank 0)");
  int axis = shape.normalize_axis(attrs.get_int("axis"));
  int64_t step = attrs.get_int("step");
  TANDEM_CHECK(step > 0, "step must be positive, got ", step);
  int64_t dim = shape[axis];
  auto clamp = [dim](int64_t i) {
    if (i < 0) i = std::max<int64_t>(i, -dim) + dim;  // No overflow for INT64_MIN.
    return std::min(i, dim);
  };
  int64_t begin = clamp(attrs.get_int("begin")), end = clamp(attrs.get_int("end"));
  int64_t count = end > begin ? (end - begin - 1) / step + 1 : 0;
  return {axis, begin, step, count};
}

TensorMetas infer_slice(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  SliceRange range = resolve_slice(in[0].shape, attrs);
  Shape::Dims dims(in[0].shape.begin(), in[0].shape.end());
  dims[range.axis] = range.count;
  return {{Shape(dims), in[0].dtype}};
}

// Copies rows begin, begin+step, ... of `full` along the axis to or from the
// contiguous `part` (scatter: part into full).
void move_strided_rows(const Tensor& full, const Tensor& part, const SliceRange& range,
                       bool scatter) {
  size_t row = static_cast<size_t>(inner_size(full.shape(), range.axis)) * dtype_size(full.dtype());
  if (row == 0 || range.count == 0) return;
  int64_t outer = outer_size(full.shape(), range.axis), dim = full.shape()[range.axis];
  char* f = bytes_of(full);
  char* p = bytes_of(part);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < range.count; ++j) {
      char* at = f + static_cast<size_t>(o * dim + range.begin + j * range.step) * row;
      char* other = p + static_cast<size_t>(o * range.count + j) * row;
      if (scatter) {
        std::memcpy(at, other, row);
      } else {
        std::memcpy(other, at, row);
      }
    }
  }
}

void slice_kernel(const KernelContext& c) {
  move_strided_rows(c.inputs[0], c.outputs[0], resolve_slice(c.inputs[0].shape(), c.attrs),
                    /*scatter=*/false);
}

std::vector<Tensor> slice_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  const Shape& shape = c.inputs[0].shape();
  SliceRange range = resolve_slice(shape, c.attrs);
  if (range.step == 1) {
    Ints pads(2 * shape.rank(), 0);
    pads[2 * range.axis] = range.begin;
    pads[2 * range.axis + 1] = shape[range.axis] - range.begin - range.count;
    return {nested_call1(pad_op(), {g}, {{"pads", pads}})};
  }
  Attrs attrs = c.attrs;
  attrs.set("size", shape[range.axis]);
  return {nested_call1("slice_backward", {g}, attrs)};
}

// slice_backward: the rows of a slice put back in zeros, along an axis of
// length `size`; the gradient of a strided slice.

TensorMetas infer_slice_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(in[0].shape.rank() > 0, "cannot scatter a scalar (rank 0)");
  int axis = in[0].shape.normalize_axis(attrs.get_int("axis"));
  int64_t size = attrs.get_int("size");
  TANDEM_CHECK(size >= 0, "size must be non-negative, got ", size);
  Shape::Dims dims(in[0].shape.begin(), in[0].shape.end());
  dims[axis] = size;
  Shape shape(dims);
  SliceRange range = resolve_slice(shape, attrs);
  TANDEM_CHECK(range.count == in[0].shape[axis], "the slice of ", shape.to_string(), " has ",
               range.count, " rows along axis ", axis, " but the input ", in[0].shape.to_string(),
               " has ", in[0].shape[axis]);
  return {{shape, in[0].dtype}};
}

void slice_backward_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());  // Zero in every dtype.
  move_strided_rows(out, c.inputs[0], resolve_slice(out.shape(), c.attrs), /*scatter=*/true);
}

std::vector<Tensor> slice_backward_gradient(const GradContext& c) {
  Attrs attrs;
  for (const char* name : {"axis", "begin", "end", "step"}) attrs.set(name, c.attrs.get_int(name));
  return {nested_call1("slice", {c.grad_outputs[0]}, attrs)};
}

// take: out[o, j..., i] = x[o, indices[j...], i] along `axis`; indices are
// int64, negative ones count from the end, and out-of-range ones fail in
// the kernel (their values are data, not known at inference).

Shape take_shape(const Shape& x, int axis, const Shape& indices) {
  Shape::Dims dims(x.begin(), x.begin() + axis);
  dims.insert(dims.end(), indices.begin(), indices.end());
  dims.insert(dims.end(), x.begin() + axis + 1, x.end());
  return Shape(dims);
}

// Checks x and the indices of take, index_add and embedding; returns `axis`
// normalized.
int take_axis(const TensorMeta& x, const TensorMeta& indices, int64_t axis) {
  TANDEM_CHECK(x.shape.rank() > 0, "cannot index a scalar (rank 0)");
  TANDEM_CHECK(indices.dtype == DType::kInt64, "indices must be int64, got ",
               dtype_name(indices.dtype), " (shape ", indices.shape.to_string(), ")");
  return x.shape.normalize_axis(axis);
}

int take_axis(const TensorMeta& x, const TensorMeta& indices, const Attrs& attrs) {
  return take_axis(x, indices, attrs.get_int("axis"));
}

TensorMetas infer_take(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  int axis = take_axis(in[0], in[1], attrs);
  return {{take_shape(in[0].shape, axis, in[1].shape), in[0].dtype}};
}

// What a negative index means: a position from the end (take, index_add) or
// nothing (embedding).
enum class NegativeIndices { kFromEnd, kOutOfRange };

// The indices, each checked against axis `axis` of `x` and made non-negative.
std::vector<int64_t> checked_indices(const Tensor& indices, const Shape& x, int axis,
                                     NegativeIndices negative) {
  const int64_t dim = x[axis];
  const int64_t lowest = negative == NegativeIndices::kFromEnd ? -dim : 0;
  const int64_t* data = indices.data<int64_t>();
  std::vector<int64_t> resolved(data, data + indices.numel());
  for (int64_t& index : resolved) {
    TANDEM_CHECK(index >= lowest && index < dim, "index ", index,
                 " is out of range for an axis of size ", dim, " (axis ", axis, " of shape ",
                 x.to_string(), "; valid: ", lowest, " to ", dim - 1, ")");
    if (index < 0) index += dim;
  }
  return resolved;
}

// out[o, j, i] = x[o, indices[j], i] along `axis`, for checked indices.
void gather_rows(const Tensor& x, int axis, const std::vector<int64_t>& indices,
                 const Tensor& out) {
  const int64_t dim = x.shape()[axis];
  size_t row = static_cast<size_t>(inner_size(x.shape(), axis)) * dtype_size(x.dtype());
  int64_t outer = outer_size(x.shape(), axis), count = static_cast<int64_t>(indices.size());
  if (row == 0) return;
  const char* src = bytes_of(x);
  char* dst = bytes_of(out);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < count; ++j) {
      std::memcpy(dst + static_cast<size_t>(o * count + j) * row,
                  src + static_cast<size_t>(o * dim + indices[j]) * row, row);
    }
  }
}

void take_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  gather_rows(x, axis, checked_indices(c.inputs[1], x.shape(), axis, NegativeIndices::kFromEnd),
              c.outputs[0]);
}

std::vector<Tensor> take_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  return {nested_call1("index_add", {zeros_like(x), c.inputs[1], c.grad_outputs[0]},
                       {{"axis", c.attrs.get_int("axis")}}),
          Tensor()};
}

// embedding: out[j..., i] = weight[indices[j...], i], take along axis 0 but
// with every index in [0, rows): a lookup table has no rows "from the end"
// (as in PyTorch), so -1 is out of range, not the last row.

TensorMetas infer_embedding(absl::Span<const TensorMeta> in, const Attrs&) {
  take_axis(in[0], in[1], int64_t{0});
  return {{take_shape(in[0].shape, 0, in[1].shape), in[0].dtype}};
}

void embedding_kernel(const KernelContext& c) {
  const Tensor& weight = c.inputs[0];
  gather_rows(weight, 0,
              checked_indices(c.inputs[1], weight.shape(), 0, NegativeIndices::kOutOfRange),
              c.outputs[0]);
}

std::vector<Tensor> embedding_gradient(const GradContext& c) {
  const Tensor& weight = c.inputs[0];
  return {nested_call1("index_add", {zeros_like(weight), c.inputs[1], c.grad_outputs[0]}),
          Tensor()};
}

// index_add: out = x, then out[o, indices[j...], i] += src[o, j..., i]; the
// adjoint of take. Repeated indices accumulate.

TensorMetas infer_index_add(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  int axis = take_axis(in[0], in[1], attrs);
  TANDEM_CHECK(in[0].dtype != DType::kBool && in[0].dtype != DType::kFloat16 &&
                   in[0].dtype != DType::kBFloat16,
               "adding ", dtype_name(in[0].dtype), " values is not supported; cast to float32");
  TANDEM_CHECK(in[2].dtype == in[0].dtype, "dtype mismatch: x is ", dtype_name(in[0].dtype),
               " but src is ", dtype_name(in[2].dtype));
  Shape expected = take_shape(in[0].shape, axis, in[1].shape);
  TANDEM_CHECK(in[2].shape == expected, "src has shape ", in[2].shape.to_string(), " but x ",
               in[0].shape.to_string(), " with indices ", in[1].shape.to_string(), " along axis ",
               axis, " needs ", expected.to_string());
  return {in[0]};
}

void index_add_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  int64_t dim = x.shape()[axis];
  std::vector<int64_t> indices =
      checked_indices(c.inputs[1], x.shape(), axis, NegativeIndices::kFromEnd);
  if (out.nbytes() > 0) std::memcpy(out.raw_data(), x.raw_data(), out.nbytes());
  int64_t inner = inner_size(x.shape(), axis), outer = outer_size(x.shape(), axis);
  int64_t count = static_cast<int64_t>(indices.size());
  visit_numeric(x.dtype(), [&]<class T>() {
    const T* src = c.inputs[2].data<T>();
    T* dst = out.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < count; ++j) {
        T* to = dst + (o * dim + indices[j]) * inner;
        const T* from = src + (o * count + j) * inner;
        for (int64_t i = 0; i < inner; ++i) to[i] = elementwise::Add{}(to[i], from[i]);
      }
    }
  });
}

std::vector<Tensor> index_add_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  return {g, Tensor(), nested_call1("take", {g, c.inputs[1]}, {{"axis", c.attrs.get_int("axis")}})};
}

// expand: x broadcast to `shape` (NumPy rules; -1 keeps x's dimension).

TensorMetas infer_expand(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const Shape& from = in[0].shape;
  const Ints& target = attrs.get_ints("shape");
  int rank = static_cast<int>(target.size());
  TANDEM_CHECK(rank >= from.rank(), "cannot expand ", from.to_string(), " to ",
               ints_to_string(target), ": the target has fewer dimensions");
  Shape::Dims dims(target.begin(), target.end());
  for (int i = 0; i < rank; ++i) {
    int from_axis = i - (rank - from.rank());
    int64_t have = from_axis >= 0 ? from[from_axis] : 1;
    if (dims[i] == -1 && from_axis >= 0) dims[i] = have;
    TANDEM_CHECK(dims[i] >= 0, "cannot expand ", from.to_string(), " to ", ints_to_string(target),
                 ": invalid dimension ", dims[i], " at axis ", i);
    TANDEM_CHECK(have == dims[i] || have == 1, "cannot expand ", from.to_string(), " to ",
                 ints_to_string(target), ": dimension ", have, " at axis ", i, " is neither 1 nor ",
                 dims[i]);
  }
  return {{Shape(dims), in[0].dtype}};
}

void expand_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  strided_copy(x, out, broadcast_strides(x.shape(), out.shape()));
}

std::vector<Tensor> expand_gradient(const GradContext& c) {
  return {sum_to(c.grad_outputs[0], c.inputs[0].shape())};
}

}  // namespace

const OpDef& reshape_op() { return op_def<"reshape">(); }
const OpDef& concat_op() { return op_def<"concat">(); }
const OpDef& take_op() { return op_def<"take">(); }
const OpDef& embedding_op() { return op_def<"embedding">(); }
const OpDef& expand_op() { return op_def<"expand">(); }
const OpDef& slice_op() { return op_def<"slice">(); }
const OpDef& split_op() { return op_def<"split">(); }
const OpDef& transpose_op() { return op_def<"transpose">(); }

// A table, one registry.add per op, each entry its op's whole definition:
// long, but with nothing to split.
void register_shape_ops(Registry& registry) {
  constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();
  registry.add({.name = "reshape",
                .attrs = {required("shape", Ints{})},
                .infer = infer_reshape,
                .cpu = copy_kernel,
                .gradient = reshape_gradient,
                .doc = "x with a new shape of the same element count (one -1 is inferred)",
                .is_view = true});
  registry.add({.name = "flatten",
                .attrs = {optional("start_axis", int64_t{1}), optional("end_axis", int64_t{-1})},
                .infer = infer_flatten,
                .cpu = copy_kernel,
                .gradient = reshape_gradient,
                .doc = "axes start_axis..end_axis merged into one",
                .is_view = true});
  registry.add({.name = "transpose",
                .attrs = {optional("perm", Ints{})},
                .infer = infer_transpose,
                .cpu = transpose_kernel,
                .gradient = transpose_gradient,
                .doc = "axes permuted: out.shape[i] = x.shape[perm[i]] (empty perm reverses)"});
  registry.add({.name = "concat",
                .num_inputs = kVariadic,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_concat,
                .cpu = concat_kernel,
                .gradient = concat_gradient,
                .doc = "inputs joined along an existing axis"});
  registry.add({.name = "stack",
                .num_inputs = kVariadic,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_stack,
                .cpu = stack_kernel,
                .gradient = stack_gradient,
                .doc = "inputs of one shape joined along a new axis"});
  registry.add({.name = "split",
                .num_outputs = kVariadic,
                .attrs = {optional("axis", int64_t{0}), required("sizes", Ints{})},
                .infer = infer_split,
                .cpu = split_kernel,
                .gradient = split_gradient,
                .doc = "x cut along an axis into pieces of the given sizes"});
  registry.add({.name = "slice",
                .attrs = {optional("axis", int64_t{0}), optional("begin", int64_t{0}),
                          optional("end", kEnd), optional("step", int64_t{1})},
                .infer = infer_slice,
                .cpu = slice_kernel,
                .gradient = slice_gradient,
                .doc = "x[begin:end:step] along an axis (Python bounds; step > 0)"});
  registry.add(
      {.name = "slice_backward",
       .attrs = {optional("axis", int64_t{0}), optional("begin", int64_t{0}), optional("end", kEnd),
                 optional("step", int64_t{1}), required("size", int64_t{0})},
       .infer = infer_slice_backward,
       .cpu = slice_backward_kernel,
       .gradient = slice_backward_gradient,
       .doc = "a slice's rows put back in zeros along an axis of length size"});
  registry.add({.name = "take",
                .num_inputs = 2,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_take,
                .cpu = take_kernel,
                .gradient = take_gradient,
                .doc = "x indexed along an axis by int64 indices (negative count from the end)"});
  registry.add({.name = "embedding",
                .num_inputs = 2,
                .infer = infer_embedding,
                .cpu = embedding_kernel,
                .gradient = embedding_gradient,
                .doc = "rows of weight at int64 indices, each in [0, rows) (take along axis 0)"});
  registry.add({.name = "index_add",
                .num_inputs = 3,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_index_add,
                .cpu = index_add_kernel,
                .gradient = index_add_gradient,
                .doc = "x with src added at rows indices along an axis (take's adjoint)"});
  registry.add({.name = "expand",
                .attrs = {required("shape", Ints{})},
                .infer = infer_expand,
                .cpu = expand_kernel,
                .gradient = expand_gradient,
                .doc = "x broadcast to shape (-1 keeps a dimension)"});
}

}  // namespace tandem::kernels
