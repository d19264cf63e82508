// ONNX's Det as Gaussian elimination with partial pivoting, unrolled at
// import over the matrices' size n (their shape is static): step k brings
// the row with the largest |value| in column k up (a gather of rows, each
// matrix its own pivot), multiplies the determinant by the pivot (negated
// when rows swapped), and subtracts multiples of the pivot row from the
// rows below. O(n) ops of O(n^2) work each, so n is bounded.
#include <optional>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

constexpr int64_t kMaxDetSize = 64;

void convert_det(Node& n) {
  OnnxValue a = n.input(0);
  const Shape xs = n.shape(0);
  const int64_t rank = xs.rank();
  if (rank < 2 || xs[int(rank - 1)] != xs[int(rank - 2)]) {
    n.refuse(str_cat("X must be [..., n, n], not ", xs.to_string()));
  }
  if (!is_floating_point(n.dtype(0))) n.refuse("X must be a float tensor");
  const int64_t size = xs[int(rank - 1)];
  if (size > kMaxDetSize)
    n.refuse(str_cat("matrices of ", size, " rows unroll past ", kMaxDetSize));
  const int64_t rows = rank - 2, columns = rank - 1;
  const Ints batch(xs.begin(), xs.end() - 2);
  auto with = [&](Ints tail) {
    Ints dims = batch;
    dims.insert(dims.end(), tail.begin(), tail.end());
    return dims;
  };
  if (size == 0) {
    return n.set_output(
        0, n.op(kernels::full_op(), {{"shape", batch}, {"dtype", n.dtype(0)}, {"value", 1.0}}, {}));
  }
  Ints positions;
  for (int64_t i = 0; i < size; ++i) positions.push_back(i);
  Ints line(size_t(rank - 1), 1);
  line.back() = size;
  const OnnxValue index = n.constant(Tensor::from_vector<int64_t>(positions, Shape(line)));
  std::optional<OnnxValue> det;
  for (int64_t k = 0; k < size; ++k) {
    // The pivot: the largest |a[i][k]| for i >= k.
    const OnnxValue column = sliced(n, slice_at(n, a, columns, k), rows, k, size);
    const OnnxValue best =
        n.op(kernels::argmax_op(), {{"axis", int64_t(batch.size())}, {"keepdims", true}},
             {ew1<ew::Abs>(n, column)});
    const OnnxValue pivot_row = ew2<ew::Add>(n, best, n.scalar(double(k), DType::kInt64));
    const OnnxValue at_k = n.scalar(double(k), DType::kInt64);
    // Rows k and pivot_row exchanged: perm[i] = pivot_row, k or i.
    const OnnxValue perm =
        n.op(kernels::where_op(), {},
             {n.op(kernels::eq_op(), {}, {index, at_k}), pivot_row,
              n.op(kernels::where_op(), {},
                   {n.op(kernels::eq_op(), {}, {index, pivot_row}), at_k, index})});
    a = n.op(kernels::gather_op(), {{"axis", rows}},
             {a, n.op(kernels::expand_op(), {{"shape", dims_of(xs)}},
                      {reshape(n, perm, with({size, 1}))})});
    const OnnxValue swapped = reshape(n, n.op(kernels::ne_op(), {}, {pivot_row, at_k}), batch);
    const OnnxValue pivot = slice_at(n, slice_at(n, a, columns, k), rows, k);
    const OnnxValue factor =
        n.op(kernels::where_op(), {}, {swapped, ew1<ew::Neg>(n, pivot), pivot});
    det = det ? ew2<ew::Mul>(n, *det, factor) : factor;
    if (k + 1 == size) break;
    // Rows below k less their multiple of row k (a zero pivot divides by
    // one instead: the determinant is zero already).
    const OnnxValue zero = scalar_like(n, pivot, 0);
    const OnnxValue divisor =
        n.op(kernels::where_op(), {},
             {n.op(kernels::eq_op(), {}, {pivot, zero}), scalar_like(n, pivot, 1), pivot});
    const OnnxValue below = sliced(n, a, rows, k + 1, size);
    const OnnxValue multiple =
        ew2<ew::Div>(n, sliced(n, below, columns, k, k + 1), reshape(n, divisor, with({1, 1})));
    const OnnxValue reduced =
        ew2<ew::Sub>(n, below, ew2<ew::Mul>(n, multiple, sliced(n, a, rows, k, k + 1)));
    a = n.op(kernels::concat_op(), {{"axis", rows}}, {sliced(n, a, rows, 0, k + 1), reduced});
  }
  n.set_output(0, *det);
}

}  // namespace

void add_det_converter(ConverterTable& table) { table.insert({"Det", convert_det}); }

}  // namespace tandem::serialization::onnx_convert
