// Rows for sort.cc (sort, topk) and their error messages. The reference
// ranks each line by counting: position s comes before t when its value is
// smaller (larger when descending), NaN largest, or equal with s < t; a
// position's rank is how many come before it. That is the stable order
// without any sorting algorithm.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

// Whether a orders before b ascending, NaN largest; equal values do not.
bool smaller(double a, double b) { return !std::isnan(a) && (std::isnan(b) || a < b); }

// The first `count` values of each line along `axis` in stable order, and
// their positions.
std::vector<Tensor> ordered(const Tensor& t, int axis, int64_t count, bool descending) {
  HostTensor x(t);
  axis = axis < 0 ? axis + x.shape.rank() : axis;
  Shape::Dims dims(x.shape.begin(), x.shape.end());
  dims[axis] = count;
  Shape out(dims);
  std::vector<double> values(static_cast<size_t>(out.numel())), indices(values.size());
  for_each_index(x.shape, [&](const Index& p) {
    int64_t rank = 0;
    Index q = p;
    for (q[axis] = 0; q[axis] < x.shape[axis]; ++q[axis]) {
      double a = x.at(q), b = x.at(p);
      bool before = descending ? smaller(b, a) : smaller(a, b);
      bool tie = !smaller(a, b) && !smaller(b, a);
      if (before || (tie && q[axis] < p[axis])) ++rank;
    }
    if (rank >= count) return;
    Index to = p;
    to[axis] = rank;
    int64_t flat = 0;
    for (int d = 0; d < out.rank(); ++d) flat = flat * out[d] + to[d];
    values[flat] = x.at(p);
    indices[flat] = static_cast<double>(p[axis]);
  });
  return {result(values, out, t.dtype()), result(indices, out, DType::kInt64)};
}

OpTestCase sort_row(std::string name, Tensor x, int axis, bool descending) {
  return {.name = std::move(name),
          .op = "sort",
          .inputs = {x},
          .attrs = {{"axis", int64_t{axis}}, {"descending", descending}},
          .reference =
              [axis, descending](const Inputs& in) {
                return ordered(in[0], axis, in[0].shape().dim(axis), descending);
              },
          .check_gradient = x.dtype() == DType::kFloat64};
}

OpTestCase topk_row(std::string name, Tensor x, int64_t k, int axis, bool largest,
                    bool gradient = true) {
  return {.name = std::move(name),
          .op = "topk",
          .inputs = {x},
          .attrs = {{"k", k}, {"axis", int64_t{axis}}, {"largest", largest}},
          .reference = [k, axis,
                        largest](const Inputs& in) { return ordered(in[0], axis, k, largest); },
          .check_gradient = gradient && x.dtype() == DType::kFloat64};
}

TANDEM_OP_TEST_ROWS(sort) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Ties and NaNs: values only forward (a tie has no derivative).
  Tensor ties = tensor_of({3, 1, nan, 1, -2, 3, 0, nan, -2, 5, 1, 1}, {3, 4});
  std::vector<OpTestCase> rows = {
      sort_row("last_axis", random_tensor({3, 5}, 1), -1, false),
      sort_row("axis0_descending", random_tensor({4, 2, 3}, 2), 0, true),
      sort_row("middle_axis", random_tensor({2, 6, 2}, 3), 1, false),
      sort_row("int32", tensor_of({4, -1, 4, 0, 7, -1}, {6}, DType::kInt32), 0, true),
      sort_row("float32", random_tensor({2, 7}, 4, -1, 1, DType::kFloat32), 1, false),
      sort_row("empty_axis", random_tensor({2, 0}, 5), 1, false),
      topk_row("largest", random_tensor({3, 6}, 6), 2, -1, true),
      topk_row("smallest_axis0", random_tensor({5, 3}, 7), 3, 0, false),
      topk_row("all", random_tensor({2, 4}, 8), 4, 1, true),
      topk_row("none", random_tensor({2, 4}, 9), 0, 1, true),
      topk_row("int64", tensor_of({5, 9, -3, 9, 2, 0}, {2, 3}, DType::kInt64), 2, 1, true),
      topk_row("ties_nan_largest", ties, 3, 1, true, /*gradient=*/false),
      topk_row("ties_nan_smallest", ties, 2, 0, false, /*gradient=*/false),
  };
  OpTestCase sort_ties = sort_row("ties_nan", ties, 1, false);
  sort_ties.check_gradient = false;
  rows.push_back(sort_ties);
  OpTestCase sort_ties_descending = sort_row("ties_nan_descending", ties, 0, true);
  sort_ties_descending.check_gradient = false;
  rows.push_back(sort_ties_descending);
  return rows;
}

// Verifies that k, the axis and the dtype are checked at the call.
TEST(SortOpsTest, CallErrors) {
  Tensor x = random_tensor({2, 3}, 1);
  std::string what = error_of([&] { call("topk", {x}, {{"k", int64_t{4}}}); });
  EXPECT_THAT(what, HasSubstr("topk"));
  EXPECT_THAT(what, HasSubstr("k = 4 must be in [0, 3], the size of axis 1 of shape [2, 3]"));
  what = error_of([&] { call("topk", {x}, {{"k", int64_t{-1}}}); });
  EXPECT_THAT(what, HasSubstr("k = -1"));
  what = error_of([&] { call("sort", {random_tensor({}, 1)}); });
  EXPECT_THAT(what, HasSubstr("cannot order a scalar"));
  what = error_of([&] { call("sort", {tensor_of({1, 0}, {2}, DType::kBool)}); });
  EXPECT_THAT(what, HasSubstr("ordering bool values is not supported; cast to uint8"));
  what = error_of([&] { call("sort", {x}, {{"axis", int64_t{-3}}}); });
  EXPECT_THAT(what, HasSubstr("axis -3"));
}

}  // namespace
}  // namespace tandem::kernels::testing
