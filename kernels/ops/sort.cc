// Ordering along an axis: sort (values and their int64 positions; argsort is
// its second output) and topk (the k largest or smallest, in order). Both
// are stable, and order NaN as larger than every number, as torch does:
// an ascending sort puts NaNs last, a descending one first. Equal values
// keep their order, so topk's ties go to the smaller index (ONNX TopK's
// rule). The gradient of the values flows back to the positions they came
// from.
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// Whether a comes before b in ascending order, NaN largest.
template <class T>
bool ascending(T a, T b) {
  return !(a != a) && ((b != b) || a < b);
}

// x seen as [outer, length, inner] around the ordered axis.
struct OrderLines {
  int64_t outer = 1, length = 1, inner = 1;

  OrderLines(const Shape& shape, int axis) : length(shape[axis]) {
    for (int d = 0; d < axis; ++d) outer *= shape[d];
    for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  }
};

int ordered_axis(const TensorMeta& x, const Attrs& attrs) {
  TANDEM_CHECK(x.shape.rank() > 0, "cannot order a scalar (rank 0); reshape it to [1]");
  TANDEM_CHECK(x.dtype != DType::kBool && x.dtype != DType::kFloat16 && x.dtype != DType::kBFloat16,
               "ordering ", dtype_name(x.dtype), " values is not supported; cast to ",
               x.dtype == DType::kBool ? "uint8" : "float32");
  return x.shape.normalize_axis(attrs.get_int("axis"));
}

TensorMetas infer_sort(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  ordered_axis(in[0], attrs);
  return {in[0], {in[0].shape, DType::kInt64}};
}

TensorMetas infer_topk(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  int axis = ordered_axis(in[0], attrs);
  const int64_t k = attrs.get_int("k");
  TANDEM_CHECK(k >= 0 && k <= in[0].shape[axis], "k = ", k, " must be in [0, ", in[0].shape[axis],
               "], the size of axis ", axis, " of shape ", in[0].shape.to_string());
  Shape::Dims dims(in[0].shape.begin(), in[0].shape.end());
  dims[axis] = k;
  return {{Shape(dims), in[0].dtype}, {Shape(dims), DType::kInt64}};
}

// The first `count` positions of each line of x in order (descending or
// not), with their values, into the outputs: sort is count = length.
void order_kernel(const KernelContext& c, int64_t count, bool descending) {
  const Tensor& x = c.inputs[0];
  const int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  const OrderLines lines(x.shape(), axis);
  visit_numeric(x.dtype(), [&]<class T>() {
    const T* in = x.data<T>();
    T* values = c.outputs[0].data<T>();
    int64_t* indices = c.outputs[1].data<int64_t>();
    std::vector<int64_t> order(lines.length);
    std::vector<T> line(lines.length);
    // Ties by position, so that a partial sort is as stable as a full one.
    auto before = [&](int64_t a, int64_t b) {
      const T va = line[a], vb = line[b];
      const bool a_first = descending ? ascending(vb, va) : ascending(va, vb);
      const bool b_first = descending ? ascending(va, vb) : ascending(vb, va);
      return a_first || (!b_first && a < b);
    };
    for (int64_t o = 0; o < lines.outer; ++o) {
      for (int64_t i = 0; i < lines.inner; ++i) {
        const T* from = in + o * lines.length * lines.inner + i;
        for (int64_t t = 0; t < lines.length; ++t) line[t] = from[t * lines.inner];
        std::iota(order.begin(), order.end(), int64_t{0});
        if (count == lines.length) {
          std::sort(order.begin(), order.end(), before);
        } else {
          std::partial_sort(order.begin(), order.begin() + count, order.end(), before);
        }
        const int64_t out = o * count * lines.inner + i;
        for (int64_t t = 0; t < count; ++t) {
          values[out + t * lines.inner] = line[order[t]];
          indices[out + t * lines.inner] = order[t];
        }
      }
    }
  });
}

void sort_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  order_kernel(c, x.shape()[x.shape().normalize_axis(c.attrs.get_int("axis"))],
               c.attrs.get_bool("descending"));
}

void topk_kernel(const KernelContext& c) {
  order_kernel(c, c.attrs.get_int("k"), c.attrs.get_bool("largest"));
}

// Each value's gradient goes back to where it came from; the positions of a
// line are distinct, so the scatter adds into zeros only.
std::vector<Tensor> order_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  if (!c.grad_outputs[0].defined()) return {Tensor()};
  return {nested_call1(scatter_add_op(), {zeros_like(x), c.outputs[1], c.grad_outputs[0]},
                       {{"axis", c.attrs.get_int("axis")}})};
}

}  // namespace

void register_sort_ops(Registry& registry) {
  registry.add({.name = "sort",
                .num_outputs = 2,
                .attrs = {{"axis", int64_t{-1}}, {"descending", false}},
                .infer = infer_sort,
                .cpu = sort_kernel,
                .gradient = order_gradient,
                .doc = "values along an axis in order, and their positions (stable; NaN largest)"});
  registry.add({.name = "topk",
                .num_outputs = 2,
                .attrs = {{"k", int64_t{0}, true}, {"axis", int64_t{-1}}, {"largest", true}},
                .infer = infer_topk,
                .cpu = topk_kernel,
                .gradient = order_gradient,
                .doc = "the k largest (or smallest) values along an axis, in order, and their "
                       "positions (ties: smaller position first)"});
}

const OpDef& topk_op() { return op_def<"topk">(); }

}  // namespace tandem::kernels
