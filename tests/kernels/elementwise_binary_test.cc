// Rows for elementwise_binary.cc, and its error messages.
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

// One row per op and broadcasting pattern, values away from the points where
// an op is not differentiable (ties of maximum/minimum, pow at a <= 0).
OpTestCase binary_row(std::string op, std::string name, Tensor a, Tensor b,
                      std::function<double(double, double)> f, DType out = DType::kFloat64) {
  return {
      .name = std::move(name),
      .op = op,
      .inputs = {std::move(a), std::move(b)},
      .reference = [f, out](const Inputs& in) { return std::vector{map2(in[0], in[1], f, out)}; }};
}

TANDEM_OP_TEST_ROWS(elementwise_binary) {
  std::vector<OpTestCase> rows;
  struct Arithmetic {
    const char* op;
    std::function<double(double, double)> f;
  };
  std::vector<Arithmetic> arithmetic = {
      {"add", [](double x, double y) { return x + y; }},
      {"sub", [](double x, double y) { return x - y; }},
      {"mul", [](double x, double y) { return x * y; }},
      {"div", [](double x, double y) { return x / y; }},
      {"maximum", [](double x, double y) { return std::max(x, y); }},
      {"minimum", [](double x, double y) { return std::min(x, y); }},
  };
  for (const auto& [op, f] : arithmetic) {
    // Divisors kept away from zero: [0.5, 2).
    rows.push_back(binary_row(op, "same_shape", random_tensor({2, 3}, 1),
                              random_tensor({2, 3}, 2, 0.5, 2), f));
    rows.push_back(binary_row(op, "broadcast_row", random_tensor({2, 3}, 3),
                              random_tensor({3}, 4, 0.5, 2), f));
    rows.push_back(binary_row(op, "broadcast_both", random_tensor({2, 1, 3}, 5),
                              random_tensor({4, 1}, 6, 0.5, 2), f));
    rows.push_back(
        binary_row(op, "scalar", random_tensor({3, 2}, 7), random_tensor({}, 8, 0.5, 2), f));
  }
  rows.push_back(binary_row("pow", "positive_base", random_tensor({2, 3}, 9, 0.5, 2),
                            random_tensor({2, 3}, 10, -2, 2),
                            [](double x, double y) { return std::pow(x, y); }));
  rows.push_back(binary_row("pow", "broadcast_exponent", random_tensor({2, 3}, 11, 0.5, 2),
                            random_tensor({}, 12, 1, 3),
                            [](double x, double y) { return std::pow(x, y); }));

  auto f32 = [](Tensor t) { return tensor_of(values_of(t), t.shape(), DType::kFloat32); };
  OpTestCase float32_add = binary_row(
      "add", "float32", f32(random_tensor({4, 5}, 13)), f32(random_tensor({5}, 14)),
      [](double x, double y) { return static_cast<float>(x) + static_cast<float>(y); },
      DType::kFloat32);
  float32_add.check_gradient = false;
  rows.push_back(float32_add);
  OpTestCase int_div = binary_row(
      "div", "int64_by_zero_is_zero", tensor_of({7, -7, 3}, {3}, DType::kInt64),
      tensor_of({2, 2, 0}, {3}, DType::kInt64),
      [](double x, double y) { return y == 0 ? 0.0 : std::trunc(x / y); }, DType::kInt64);
  int_div.check_gradient = false;
  rows.push_back(int_div);
  OpTestCase nan_max = binary_row(
      "maximum", "nan_propagates", tensor_of({NAN, 1, 2}, {3}), tensor_of({0, NAN, 1}, {3}),
      [](double x, double y) { return std::isnan(x) || std::isnan(y) ? NAN : std::max(x, y); });
  nan_max.check_gradient = false;
  rows.push_back(nan_max);

  struct Comparison {
    const char* op;
    std::function<double(double, double)> f;
  };
  std::vector<Comparison> comparisons = {
      {"eq", [](double x, double y) { return x == y; }},
      {"ne", [](double x, double y) { return x != y; }},
      {"lt", [](double x, double y) { return x < y; }},
      {"le", [](double x, double y) { return x <= y; }},
      {"gt", [](double x, double y) { return x > y; }},
      {"ge", [](double x, double y) { return x >= y; }},
  };
  for (const auto& [op, f] : comparisons) {
    OpTestCase row = binary_row(op, "broadcast", tensor_of({1, 2, 3, 4, 5, 6}, {2, 3}),
                                tensor_of({2, 5, 3}, {3}), f, DType::kBool);
    row.check_gradient = false;
    rows.push_back(row);
  }
  return rows;
}

// Verifies that incompatible shapes are refused at the call, naming the op,
// both shapes and the user's line.
TEST(ElementwiseBinaryTest, BroadcastMismatchNamesShapesAndLine) {
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({4}, 2);
  try {
    int line = __LINE__ + 1;
    call("add", {a, b});
    FAIL() << "no error";
    (void)line;
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "add");
    EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("[4]"));
    EXPECT_THAT(e.what(), HasSubstr("elementwise_binary_test.cc"));
  }
}

// Verifies that mixed dtypes are an error, not a silent promotion.
TEST(ElementwiseBinaryTest, DtypeMismatchIsAnError) {
  Tensor a = random_tensor({2}, 1), b = tensor_of({1, 2}, {2}, DType::kFloat32);
  try {
    call("mul", {a, b});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("float64"));
    EXPECT_THAT(e.what(), HasSubstr("float32"));
  }
}

// Verifies arity and unknown-op errors.
TEST(ElementwiseBinaryTest, WrongArityAndUnknownOp) {
  Tensor a = random_tensor({2}, 1);
  EXPECT_THROW(call("add", {a}), Error);
  try {
    call("no_such_op", {a});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown op 'no_such_op'"));
  }
  try {
    call("add", {a, a}, {{"alpha", 2.0}});
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown attribute 'alpha'"));
  }
}

}  // namespace
}  // namespace tandem::kernels::testing
