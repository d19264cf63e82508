#include "kernels/broadcast.h"

#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "kernels/ops/op_helpers.h"

namespace tandem::kernels {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int rank = std::max(a.rank(), b.rank());
  Shape::Dims dims(rank);
  for (int i = 1; i <= rank; ++i) {
    int64_t da = i <= a.rank() ? a[a.rank() - i] : 1;
    int64_t db = i <= b.rank() ? b[b.rank() - i] : 1;
    TANDEM_CHECK(da == db || da == 1 || db == 1, "shapes ", a.to_string(), " and ", b.to_string(),
                 " cannot broadcast: ", da, " vs ", db, " at axis -", i);
    dims[rank - i] = da == 1 ? db : da;
  }
  return Shape(dims);
}

Strides broadcast_strides(const Shape& in, const Shape& out) {
  Strides strides(out.rank(), 0);
  int64_t stride = 1;
  for (int i = 1; i <= in.rank(); ++i) {
    int64_t d = in[in.rank() - i];
    strides[out.rank() - i] = d == 1 ? 0 : stride;
    stride *= d;
  }
  return strides;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const Shape& from = grad.shape();
  int extra = from.rank() - shape.rank();
  Tensor result = grad;
  if (extra > 0) {
    std::vector<int64_t> leading(extra);
    for (int i = 0; i < extra; ++i) leading[i] = i;
    result = nested_call1(sum_op(), {result}, {{"axes", leading}, {"keepdims", false}});
  }
  std::vector<int64_t> stretched;
  for (int i = 0; i < shape.rank(); ++i) {
    if (shape[i] == 1 && result.shape()[i] != 1) stretched.push_back(i);
  }
  if (!stretched.empty()) {
    result = nested_call1(sum_op(), {result}, {{"axes", stretched}, {"keepdims", true}});
  }
  return result;
}

}  // namespace tandem::kernels
