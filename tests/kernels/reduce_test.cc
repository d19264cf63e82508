// Rows for reduce.cc, and its error messages.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

// A plain reference: reduce `x` over `axes` (all when empty) with `combine`
// over the values of each output cell, then `finish(values)`.
Tensor reduce_reference(const Tensor& x, std::vector<int64_t> axes, bool keepdims,
                        const std::function<double(const std::vector<double>&)>& finish,
                        DType dtype = DType::kFloat64) {
  const Shape& shape = x.shape();
  std::vector<bool> reduced(shape.rank(), axes.empty());
  for (int64_t a : axes) reduced[a < 0 ? a + shape.rank() : a] = true;
  Shape::Dims out_dims, keep_dims;
  for (int i = 0; i < shape.rank(); ++i) {
    keep_dims.push_back(reduced[i] ? 1 : shape[i]);
    if (!reduced[i] || keepdims) out_dims.push_back(reduced[i] ? 1 : shape[i]);
  }
  Shape keep(keep_dims);
  std::vector<std::vector<double>> cells(keep.numel());
  std::vector<double> v = values_of(x);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    int64_t rest = i, cell = 0, stride = 1;
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      int64_t index = rest % shape[axis];
      rest /= shape[axis];
      if (!reduced[axis]) cell += index * stride;
      stride *= keep[axis];
    }
    cells[cell].push_back(v[i]);
  }
  std::vector<double> out;
  for (const auto& cell : cells) out.push_back(finish(cell));
  return result(out, Shape(out_dims), dtype);
}

double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double mean_of(const std::vector<double>& v) { return sum_of(v) / v.size(); }
double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double var_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (v.size() - 1);
}

OpTestCase reduce_row(std::string op, std::string name, Tensor x, std::vector<int64_t> axes,
                      bool keepdims, double (*finish)(const std::vector<double>&)) {
  return {.name = std::move(name),
          .op = op,
          .inputs = {std::move(x)},
          .attrs = {{"axes", axes}, {"keepdims", keepdims}},
          .reference = [axes, keepdims, finish](const Inputs& in) {
            return std::vector{reduce_reference(in[0], axes, keepdims, finish)};
          }};
}

TANDEM_OP_TEST_ROWS(reduce) {
  std::vector<OpTestCase> rows;
  struct Reduction {
    const char* op;
    double (*finish)(const std::vector<double>&);
  };
  for (auto [op, finish] : std::vector<Reduction>{
           {"sum", sum_of}, {"mean", mean_of}, {"max", max_of}, {"min", min_of}, {"var", var_of}}) {
    rows.push_back(reduce_row(op, "all", random_tensor({2, 3, 4}, 1), {}, false, finish));
    rows.push_back(reduce_row(op, "last_axis", random_tensor({2, 3, 4}, 2), {-1}, false, finish));
    rows.push_back(
        reduce_row(op, "outer_axes_keepdims", random_tensor({2, 3, 4}, 3), {0, 2}, true, finish));
    rows.push_back(reduce_row(op, "middle_axis", random_tensor({3, 4, 2}, 4), {1}, false, finish));
  }
  OpTestCase int_sum = reduce_row(
      "sum", "int64", tensor_of({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kInt64), {1}, false, sum_of);
  int_sum.reference = [](const Inputs& in) {
    return std::vector{reduce_reference(in[0], {1}, false, sum_of, DType::kInt64)};
  };
  int_sum.check_gradient = false;
  rows.push_back(int_sum);
  OpTestCase ties =
      reduce_row("max", "ties_share_gradient", tensor_of({1, 3, 3, 2}, {2, 2}), {}, false, max_of);
  rows.push_back(ties);
  OpTestCase argmax{.name = "rows",
                    .op = "argmax",
                    .inputs = {tensor_of({1, 5, 5, 2, 7, 0, -1, -2, -3}, {3, 3})},
                    .attrs = {{"axis", int64_t{1}}},
                    .reference =
                        [](const Inputs&) {
                          return std::vector{result({1, 1, 0}, {3}, DType::kInt64)};
                        },
                    .check_gradient = false};
  rows.push_back(argmax);
  OpTestCase argmax_axis0 = argmax;
  argmax_axis0.name = "columns_keepdims";
  argmax_axis0.attrs = {{"axis", int64_t{0}}, {"keepdims", true}};
  argmax_axis0.reference = [](const Inputs&) {
    return std::vector{result({1, 1, 0}, {1, 3}, DType::kInt64)};
  };
  rows.push_back(argmax_axis0);
  return rows;
}

// Verifies that a bad axis is refused at the call with the shape in the message.
TEST(ReduceTest, AxisOutOfRange) {
  try {
    call("sum", {random_tensor({2, 3}, 1)}, {{"axes", std::vector<int64_t>{2}}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "sum");
    EXPECT_THAT(e.what(), HasSubstr("axis 2 is out of range for shape [2, 3]"));
  }
}

// Verifies that max over an empty axis is an error, and mean of integers too.
TEST(ReduceTest, UndefinedReductionsAreErrors) {
  EXPECT_THROW(call("max", {tensor_of({}, {0, 3})}, {{"axes", std::vector<int64_t>{0}}}), Error);
  EXPECT_THROW(call("mean", {tensor_of({1, 2}, {2}, DType::kInt64)}), Error);
}

// Verifies that argmax over a non-empty axis of an empty input gives an
// empty result (the kernel divided by the zero stride of the empty axis:
// SIGFPE), and that an extreme correction gives var's NaN or a value, not an
// overflow of the degrees of freedom.
TEST(ReduceTest, EmptyArgmaxAndExtremeCorrection) {
  for (int64_t axis : {0, -1}) {
    Tensor empty = tensor_of({}, axis == 0 ? Shape{3, 0} : Shape{0, 3});
    Tensor index = call1("argmax", {empty}, {{"axis", axis}});
    EXPECT_EQ(index.shape(), Shape{0});
    EXPECT_TRUE(values_of(index).empty());
  }
  Tensor x = tensor_of({1, 2, 4}, {3});
  EXPECT_TRUE(std::isnan(
      values_of(call1("var", {x}, {{"correction", std::numeric_limits<int64_t>::max()}}))[0]));
  double tiny =
      values_of(call1("var", {x}, {{"correction", std::numeric_limits<int64_t>::min()}}))[0];
  EXPECT_NEAR(tiny, 14.0 / 3 / 0x1p63, 1e-30);  // Squares 14/3 over 3 + 2^63 degrees.
}

// Verifies that a float32 sum of many values keeps float64-accumulated precision.
TEST(ReduceTest, Float32SumAccumulatesInDouble) {
  std::vector<double> ones(1 << 20, 0.1);
  Tensor x = tensor_of(ones, {1 << 20}, DType::kFloat32);
  double got = values_of(call1("sum", {x}))[0];
  EXPECT_NEAR(got, 0.1f * (1 << 20), 1e-3 * (1 << 20) * 1e-3);
}

}  // namespace
}  // namespace tandem::kernels::testing
