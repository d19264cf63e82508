// Indexing by tensors of int64 indices: gather, scatter and scatter_add
// element by element along an axis (torch.gather and Tensor.scatter_, ONNX
// GatherElements and ScatterElements), gather_nd and its adjoint
// scatter_nd_add by index tuples (ONNX GatherND, and ScatterND with
// reduction "add"), and one_hot. take and index_add, which move whole rows,
// are shape ops (shape.cc).
//
// Note [Negative indices]: every index these ops take may count from the
// end, as in NumPy and ONNX: -1 is the last position of its axis. An index
// outside [-size, size) is an Error naming the index, its position in the
// index tensor, the axis and the shape it indexes (the op and the user's
// line are added by dispatch). embedding is the one exception: a lookup
// table has no rows "from the end". Index values are data, so the CPU
// kernels check them, not inference; GPU kernels cannot fail and skip such
// an index instead (Note [Indices out of range on the GPU] in
// kernels/cuda/indexing.cuh).
#include <cstring>
#include <string>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/element_cast.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// The coordinates of row-major element `i` of `shape`, as "[1, 0, 2]".
std::string position_text(int64_t i, const Shape& shape) {
  Shape::Dims position(shape.rank(), 0);
  for (int d = shape.rank() - 1; d >= 0; --d) {
    if (shape[d] == 0) break;
    position[d] = i % shape[d];
    i /= shape[d];
  }
  return Shape(position).to_string();
}

// `index`, element `i` of an index tensor of shape `indices`, made
// non-negative for an axis of `size`; an Error when it is out of range,
// which says what the axis is with `axis_text()` (computed only then).
template <class AxisText>
int64_t resolve_index(int64_t index, int64_t size, int64_t i, const Shape& indices,
                      const AxisText& axis_text) {
  if (index >= -size && index < size) return index < 0 ? index + size : index;
  TANDEM_CHECK(false, "index ", index, " at position ", position_text(i, indices),
               " of the indices (shape ", indices.to_string(), ") is out of range for ",
               axis_text(), " (valid: ", -size, " to ", size - 1, ")");
  return 0;  // Unreachable.
}

// "axis 1 of size 4 in shape [2, 4]"
std::string axis_text(int axis, const Shape& shape) {
  return "axis " + std::to_string(axis) + " of size " + std::to_string(shape[axis]) + " in shape " +
         shape.to_string();
}

void check_indices_dtype(const TensorMeta& indices) {
  TANDEM_CHECK(indices.dtype == DType::kInt64, "indices must be int64, got ",
               dtype_name(indices.dtype), " (shape ", indices.shape.to_string(), ")");
}

// Values an op adds (scatter_add, scatter_nd_add): the numeric dtypes.
void check_addable(DType dtype) {
  TANDEM_CHECK(dtype != DType::kBool && dtype != DType::kFloat16 && dtype != DType::kBFloat16,
               "adding ", dtype_name(dtype), " values is not supported; cast to float32");
}

void check_same_dtype(const TensorMeta& x, const TensorMeta& src, const char* src_name) {
  TANDEM_CHECK(src.dtype == x.dtype, "dtype mismatch: x is ", dtype_name(x.dtype), " but ",
               src_name, " is ", dtype_name(src.dtype));
}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

void copy_into(const Tensor& out, const Tensor& x) {
  if (out.nbytes() > 0) std::memcpy(out.raw_data(), x.raw_data(), out.nbytes());
}

// ---- gather, scatter, scatter_add: one index per element, along an axis. ----

// Checks x and the indices of gather and the scatters; returns the axis,
// normalized. As in torch, the indices have x's rank and may be smaller
// than x on every axis but the indexed one, whose length is free.
int elementwise_axis(const TensorMeta& x, const TensorMeta& indices, const Attrs& attrs) {
  check_indices_dtype(indices);
  TANDEM_CHECK(x.shape.rank() > 0, "cannot index a scalar (rank 0)");
  TANDEM_CHECK(indices.shape.rank() == x.shape.rank(), "indices of shape ",
               indices.shape.to_string(), " have rank ", indices.shape.rank(), " but x of shape ",
               x.shape.to_string(), " has rank ", x.shape.rank(), "; they must match");
  int axis = x.shape.normalize_axis(attrs.get_int("axis"));
  for (int d = 0; d < x.shape.rank(); ++d) {
    TANDEM_CHECK(d == axis || indices.shape[d] <= x.shape[d], "indices of shape ",
                 indices.shape.to_string(), " are longer than x of shape ", x.shape.to_string(),
                 " on axis ", d, "; only the indexed axis (", axis, ") may be longer");
  }
  return axis;
}

TensorMetas infer_gather(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  elementwise_axis(in[0], in[1], attrs);
  return {{in[1].shape, in[0].dtype}};
}

// scatter and scatter_add: src has the indices' shape (ONNX's rule; torch
// also allows a larger src and reads its leading part).
TensorMetas infer_scatter(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  elementwise_axis(in[0], in[1], attrs);
  check_same_dtype(in[0], in[2], "src");
  TANDEM_CHECK(in[2].shape == in[1].shape, "src has shape ", in[2].shape.to_string(),
               " but the indices have shape ", in[1].shape.to_string(), "; they must match");
  return {in[0]};
}

TensorMetas infer_scatter_add(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_addable(in[0].dtype);
  return infer_scatter(in, attrs);
}

// Calls visit(i, at) for each element i of `indices`, where `at` is the
// offset in `indexed` (contiguous) that the element addresses: its own
// position with the axis coordinate replaced by its resolved index.
template <class Visit>
void for_each_indexed(const Tensor& indices, const Shape& indexed, int axis, Visit visit) {
  const Shape& shape = indices.shape();
  const int rank = shape.rank();
  Strides strides(rank, 1);
  for (int d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * indexed[d + 1];
  const int64_t axis_stride = strides[axis];
  const int64_t* index = indices.data<int64_t>();
  Strides position(rank, 0);
  int64_t base = 0;  // The offset of the position, axis coordinate excluded.
  for (int64_t i = 0; i < indices.numel(); ++i) {
    int64_t resolved =
        resolve_index(index[i], indexed[axis], i, shape, [&] { return axis_text(axis, indexed); });
    visit(i, base + resolved * axis_stride);
    for (int d = rank - 1; d >= 0; --d) {
      if (d != axis) base += strides[d];
      if (++position[d] < shape[d]) break;
      if (d != axis) base -= strides[d] * shape[d];
      position[d] = 0;
    }
  }
}

void gather_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  visit_element_bits(dtype_size(x.dtype()), [&]<class U>() {
    const U* from = static_cast<const U*>(x.raw_data());
    U* to = static_cast<U*>(c.outputs[0].raw_data());
    for_each_indexed(c.inputs[1], x.shape(), axis,
                     [&](int64_t i, int64_t at) { to[i] = from[at]; });
  });
}

// Repeated indices: the last in row-major order of the indices wins (the GPU
// makes no such promise).
void scatter_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  copy_into(out, x);
  visit_element_bits(dtype_size(x.dtype()), [&]<class U>() {
    const U* src = static_cast<const U*>(c.inputs[2].raw_data());
    U* to = static_cast<U*>(out.raw_data());
    for_each_indexed(c.inputs[1], x.shape(), axis, [&](int64_t i, int64_t at) { to[at] = src[i]; });
  });
}

void scatter_add_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  copy_into(out, x);
  visit_numeric(x.dtype(), [&]<class T>() {
    const T* src = c.inputs[2].data<T>();
    T* to = out.data<T>();
    for_each_indexed(c.inputs[1], x.shape(), axis,
                     [&](int64_t i, int64_t at) { to[at] = elementwise::Add{}(to[at], src[i]); });
  });
}

Attrs axis_of(const GradContext& c) { return {{"axis", c.attrs.get_int("axis")}}; }

std::vector<Tensor> gather_gradient(const GradContext& c) {
  return {nested_call1(scatter_add_op(), {zeros_like(c.inputs[0]), c.inputs[1], c.grad_outputs[0]},
                       axis_of(c)),
          Tensor()};
}

// What src wrote, x did not: x's gradient is zero where an index landed.
std::vector<Tensor> scatter_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor dx, dsrc;
  if (c.needs_grad(0)) {
    dx = nested_call1("scatter", {g, c.inputs[1], zeros_like(c.inputs[2])}, axis_of(c));
  }
  if (c.needs_grad(2)) dsrc = nested_call1("gather", {g, c.inputs[1]}, axis_of(c));
  return {dx, Tensor(), dsrc};
}

std::vector<Tensor> scatter_add_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor dsrc;
  if (c.needs_grad(2)) dsrc = nested_call1("gather", {g, c.inputs[1]}, axis_of(c));
  return {g, Tensor(), dsrc};
}

// ---- gather_nd, scatter_nd_add: one index tuple per slice. ----

// How gather_nd and scatter_nd_add see their operands (ONNX GatherND): data
// [batch..., indexed (k axes)..., slice...] and indices [batch..., rows...,
// k]; each index tuple selects one slice of data in its batch.
struct TupleLayout {
  int batch_dims = 0;
  int k = 0;              // Entries per index tuple.
  int64_t batches = 1;    // Elements of the batch axes.
  int64_t rows = 1;       // Index tuples per batch.
  int64_t slice = 1;      // Elements per slice.
  int64_t per_batch = 1;  // Elements of data per batch.
  Shape out;              // indices.shape[:-1] + data.shape[batch_dims + k:]
};

TupleLayout tuple_layout(const TensorMeta& data, const TensorMeta& indices, const Attrs& attrs) {
  check_indices_dtype(indices);
  const Shape& d = data.shape;
  const Shape& i = indices.shape;
  const int64_t batch_dims = attrs.get_int("batch_dims");
  TANDEM_CHECK(i.rank() >= 1 && d.rank() >= 1, "data (shape ", d.to_string(),
               ") and indices (shape ", i.to_string(), ") need at least one axis each");
  TANDEM_CHECK(batch_dims >= 0 && batch_dims < std::min(i.rank(), d.rank()), "batch_dims ",
               batch_dims, " must be in [0, ", std::min(i.rank(), d.rank()), ") for data of shape ",
               d.to_string(), " and indices of shape ", i.to_string());
  TupleLayout l;
  l.batch_dims = static_cast<int>(batch_dims);
  const int64_t k = i[i.rank() - 1];
  TANDEM_CHECK(k >= 1 && k <= d.rank() - l.batch_dims, "index tuples of ", k,
               " entries (the last axis of indices, shape ", i.to_string(), ") must have 1 to ",
               d.rank() - l.batch_dims, " for data of shape ", d.to_string(), " and batch_dims ",
               batch_dims);
  l.k = static_cast<int>(k);
  for (int a = 0; a < l.batch_dims; ++a) {
    TANDEM_CHECK(i[a] == d[a], "batch axis ", a, " has ", i[a], " in indices (shape ",
                 i.to_string(), ") but ", d[a], " in data (shape ", d.to_string(), ")");
    l.batches *= d[a];
  }
  Shape::Dims out(i.begin(), i.end() - 1);
  for (int a = l.batch_dims; a < i.rank() - 1; ++a) l.rows *= i[a];
  for (int a = l.batch_dims + l.k; a < d.rank(); ++a) {
    l.slice *= d[a];
    out.push_back(d[a]);
  }
  for (int a = l.batch_dims; a < d.rank(); ++a) l.per_batch *= d[a];
  l.out = Shape(out);
  return l;
}

TensorMetas infer_gather_nd(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  return {{tuple_layout(in[0], in[1], attrs).out, in[0].dtype}};
}

TensorMetas infer_scatter_nd_add(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_addable(in[0].dtype);
  check_same_dtype(in[0], in[2], "updates");
  Shape expected = tuple_layout(in[0], in[1], attrs).out;
  TANDEM_CHECK(in[2].shape == expected, "updates have shape ", in[2].shape.to_string(),
               " but data of shape ", in[0].shape.to_string(), " with indices of shape ",
               in[1].shape.to_string(), " needs ", expected.to_string());
  return {in[0]};
}

// Calls visit(row, at) for each index tuple (row-major over batches and
// rows), where `at` is the offset in data of the slice it selects.
template <class Visit>
void for_each_tuple(const Tensor& data, const Tensor& indices, const TupleLayout& l, Visit visit) {
  const Shape& d = data.shape();
  const int64_t* index = indices.data<int64_t>();
  for (int64_t b = 0; b < l.batches; ++b) {
    for (int64_t r = 0; r < l.rows; ++r) {
      const int64_t row = b * l.rows + r;
      int64_t at = 0;
      for (int j = 0; j < l.k; ++j) {
        const int axis = l.batch_dims + j;
        at = at * d[axis] + resolve_index(index[row * l.k + j], d[axis], row * l.k + j,
                                          indices.shape(), [&] { return axis_text(axis, d); });
      }
      visit(row, b * l.per_batch + at * l.slice);
    }
  }
}

void gather_nd_kernel(const KernelContext& c) {
  const Tensor& data = c.inputs[0];
  TupleLayout l =
      tuple_layout({data.shape(), data.dtype()}, {c.inputs[1].shape(), DType::kInt64}, c.attrs);
  const size_t slice = static_cast<size_t>(l.slice) * dtype_size(data.dtype());
  const char* from = bytes_of(data);
  char* to = bytes_of(c.outputs[0]);
  for_each_tuple(data, c.inputs[1], l, [&](int64_t row, int64_t at) {
    if (slice > 0) std::memcpy(to + row * slice, from + at * dtype_size(data.dtype()), slice);
  });
}

void scatter_nd_add_kernel(const KernelContext& c) {
  const Tensor& data = c.inputs[0];
  const Tensor& out = c.outputs[0];
  TupleLayout l =
      tuple_layout({data.shape(), data.dtype()}, {c.inputs[1].shape(), DType::kInt64}, c.attrs);
  copy_into(out, data);
  visit_numeric(data.dtype(), [&]<class T>() {
    const T* updates = c.inputs[2].data<T>();
    T* to = out.data<T>();
    for_each_tuple(data, c.inputs[1], l, [&](int64_t row, int64_t at) {
      for (int64_t s = 0; s < l.slice; ++s) {
        to[at + s] = elementwise::Add{}(to[at + s], updates[row * l.slice + s]);
      }
    });
  });
}

Attrs batch_dims_of(const GradContext& c) {
  return {{"batch_dims", c.attrs.get_int("batch_dims")}};
}

std::vector<Tensor> gather_nd_gradient(const GradContext& c) {
  return {nested_call1("scatter_nd_add", {zeros_like(c.inputs[0]), c.inputs[1], c.grad_outputs[0]},
                       batch_dims_of(c)),
          Tensor()};
}

std::vector<Tensor> scatter_nd_add_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  Tensor dupdates;
  if (c.needs_grad(2)) dupdates = nested_call1("gather_nd", {g, c.inputs[1]}, batch_dims_of(c));
  return {g, Tensor(), dupdates};
}

// ---- one_hot: out[..., c] = (indices[...] == c), in `dtype`. ----

TensorMetas infer_one_hot(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_indices_dtype(in[0]);
  const int64_t classes = attrs.get_int("num_classes");
  TANDEM_CHECK(classes >= 1, "num_classes must be at least 1, got ", classes);
  Shape::Dims dims(in[0].shape.begin(), in[0].shape.end());
  dims.push_back(classes);
  checked_mul(in[0].shape.numel(), classes, "the one-hot tensor of indices ",
              in[0].shape.to_string(), " and ", classes, " classes");
  return {{Shape(dims), attrs.get_dtype("dtype")}};
}

void one_hot_kernel(const KernelContext& c) {
  const Tensor& indices = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const int64_t classes = c.attrs.get_int("num_classes");
  if (out.nbytes() > 0) std::memset(out.raw_data(), 0, out.nbytes());  // Zero in every dtype.
  visit_all(out.dtype(), [&]<class T>() {
    T* to = out.data<T>();
    const int64_t* index = indices.data<int64_t>();
    for (int64_t i = 0; i < indices.numel(); ++i) {
      const int64_t hot = resolve_index(index[i], classes, i, indices.shape(),
                                        [&] { return std::to_string(classes) + " classes"; });
      to[i * classes + hot] = convert<T>(1.0);
    }
  });
}

}  // namespace

const OpDef& scatter_add_op() { return op_def<"scatter_add">(); }
const OpDef& gather_op() { return op_def<"gather">(); }
const OpDef& gather_nd_op() { return op_def<"gather_nd">(); }
const OpDef& scatter_nd_add_op() { return op_def<"scatter_nd_add">(); }
const OpDef& scatter_op() { return op_def<"scatter">(); }
const OpDef& one_hot_op() { return op_def<"one_hot">(); }

void register_indexing_ops(Registry& registry) {
  registry.add({.name = "gather",
                .num_inputs = 2,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_gather,
                .cpu = gather_kernel,
                .gradient = gather_gradient,
                .doc = "out[p] = x[p with axis coordinate indices[p]] (GatherElements)"});
  registry.add(
      {.name = "scatter",
       .num_inputs = 3,
       .attrs = {optional("axis", int64_t{0})},
       .infer = infer_scatter,
       .cpu = scatter_kernel,
       .gradient = scatter_gradient,
       .doc = "x with src[p] written at p's axis coordinate indices[p] (ScatterElements)"});
  registry.add({.name = "scatter_add",
                .num_inputs = 3,
                .attrs = {optional("axis", int64_t{0})},
                .infer = infer_scatter_add,
                .cpu = scatter_add_kernel,
                .gradient = scatter_add_gradient,
                .doc = "x with src[p] added at p's axis coordinate indices[p] (gather's adjoint)"});
  registry.add({.name = "gather_nd",
                .num_inputs = 2,
                .attrs = {optional("batch_dims", int64_t{0})},
                .infer = infer_gather_nd,
                .cpu = gather_nd_kernel,
                .gradient = gather_nd_gradient,
                .doc = "slices of data at index tuples, the last axis of indices (GatherND)"});
  registry.add({.name = "scatter_nd_add",
                .num_inputs = 3,
                .attrs = {optional("batch_dims", int64_t{0})},
                .infer = infer_scatter_nd_add,
                .cpu = scatter_nd_add_kernel,
                .gradient = scatter_nd_add_gradient,
                .doc = "data with updates added at index tuples (gather_nd's adjoint)"});
  registry.add({.name = "one_hot",
                .attrs = {required("num_classes", int64_t{0}), optional("dtype", DType::kInt64)},
                .infer = infer_one_hot,
                .cpu = one_hot_kernel,
                .differentiable = false,
                .doc = "indices as one-hot vectors along a new last axis of num_classes"});
}

}  // namespace tandem::kernels
