// Rows for elementwise_binary.cc, and its error messages.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/engine/engine.h"
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
  // Integer division truncates; INT_MIN / -1 wraps to INT_MIN (Note [Integer
  // arithmetic]). -2^63 and -2^31 are exact in the doubles of the reference.
  auto truncated = [](double x, double y) {
    return y == -1 ? (x == -0x1p63 || x == -0x1p31 ? x : -x) : std::trunc(x / y);
  };
  for (DType dtype : {DType::kInt64, DType::kInt32}) {
    const double lowest = dtype == DType::kInt64 ? -0x1p63 : -0x1p31;
    OpTestCase int_div =
        binary_row("div", str_cat(dtype_name(dtype), "_truncates"),
                   tensor_of({7, -7, 7, -7, lowest, lowest, 0}, {7}, dtype),
                   tensor_of({2, 2, -2, -2, -1, 1, 5}, {7}, dtype), truncated, dtype);
    int_div.check_gradient = false;
    rows.push_back(int_div);
    OpTestCase by_scalar = binary_row("div", str_cat(dtype_name(dtype), "_by_scalar_minus_one"),
                                      tensor_of({lowest, 5, -3}, {3}, dtype),
                                      tensor_of({-1}, {}, dtype), truncated, dtype);
    by_scalar.check_gradient = false;
    rows.push_back(by_scalar);
  }
  OpTestCase uint8_div =
      binary_row("div", "uint8", tensor_of({200, 7, 255}, {3}, DType::kUInt8),
                 tensor_of({3, 2, 255}, {3}, DType::kUInt8), truncated, DType::kUInt8);
  uint8_div.check_gradient = false;
  rows.push_back(uint8_div);
  // Integer powers are exact: 3^39 needs more than a double's 53 bits.
  OpTestCase int_pow = binary_row(
      "pow", "int64_exact", tensor_of({3, -2, 2, 1, -1, -1, 5}, {7}, DType::kInt64),
      tensor_of({39, 3, 0, -5, -3, -4, -1}, {7}, DType::kInt64),
      [](double x, double y) {
        if (x == 3 && y == 39) return 4052555153018976267.0;  // Rounded like values_of().
        return y < 0 ? (std::abs(x) == 1 ? std::pow(x, y) : 0.0) : std::pow(x, y);
      },
      DType::kInt64);
  int_pow.check_gradient = false;
  rows.push_back(int_pow);
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

// The process-wide engine of one kind for a scope (engine::configure), then
// the threaded one again.
class ScopedEngine {
 public:
  explicit ScopedEngine(engine::EngineKind kind) { engine::configure(kind); }
  ~ScopedEngine() { engine::configure(engine::EngineKind::kThreaded); }
  ScopedEngine(const ScopedEngine&) = delete;
  ScopedEngine& operator=(const ScopedEngine&) = delete;
};

constexpr engine::EngineKind kEngines[] = {engine::EngineKind::kThreaded,
                                           engine::EngineKind::kNaive};

template <class T>
std::vector<T> values(const Tensor& t) {
  return t.to_vector<T>();
}

template <class T>
void expect_wrapping_division() {
  constexpr T kLowest = std::numeric_limits<T>::lowest(), kMax = std::numeric_limits<T>::max();
  Tensor a = Tensor::from_vector<T>({kLowest, kLowest, kMax, -7, 7}, {5});
  // By a tensor of divisors and by a rank-0 scalar (the scalar overloads of
  // eager's div), in loops that each take their own path (row_loop).
  Tensor b = Tensor::from_vector<T>({-1, 1, -1, 2, -2}, {5});
  EXPECT_EQ(values<T>(call1("div", {a, b})), (std::vector<T>{kLowest, kLowest, -kMax, -3, -3}));
  Tensor minus_one = Tensor::from_vector<T>({-1}, {});
  EXPECT_EQ(values<T>(call1("div", {a, minus_one})),
            (std::vector<T>{kLowest, kLowest, -kMax, 7, -7}));
  EXPECT_EQ(values<T>(call1("div", {Tensor::from_vector<T>({kLowest}, {}), minus_one})),
            (std::vector<T>{kLowest}));
  // Broadcast along rows: the strided loops.
  Tensor rows = Tensor::from_vector<T>({kLowest, 6, kLowest, 6}, {2, 2});
  EXPECT_EQ(values<T>(call1("div", {rows, Tensor::from_vector<T>({-1, -1}, {2, 1})})),
            (std::vector<T>{kLowest, -6, kLowest, -6}));
}

// Verifies that INT_MIN / -1 wraps to INT_MIN (it trapped with SIGFPE on
// x86) for int32 and int64, tensor and scalar divisors, on both engines.
TEST(IntegerArithmeticTest, MinByMinusOneWrapsOnBothEngines) {
  for (engine::EngineKind kind : kEngines) {
    SCOPED_TRACE(kind == engine::EngineKind::kNaive ? "naive engine" : "threaded engine");
    ScopedEngine scoped(kind);
    expect_wrapping_division<int64_t>();
    expect_wrapping_division<int32_t>();
  }
}

// Verifies that integer division by zero fails the op, naming it and the
// dividend, on both engines (the naive one at the call, the threaded one at
// the read), for tensor and scalar divisors and 0 to a negative power.
TEST(IntegerArithmeticTest, DivisionByZeroIsAnError) {
  for (engine::EngineKind kind : kEngines) {
    SCOPED_TRACE(kind == engine::EngineKind::kNaive ? "naive engine" : "threaded engine");
    ScopedEngine scoped(kind);
    Tensor a = Tensor::from_vector<int64_t>({4, 5}, {2});
    std::string what = error_of([&] {
      values<int64_t>(call1("div", {a, Tensor::from_vector<int64_t>({1, 0}, {2})}));
    });
    EXPECT_THAT(what, HasSubstr("div: integer division by zero (5 / 0)"));
    what = error_of([&] {
      values<int32_t>(call1(
          "div", {Tensor::from_vector<int32_t>({-3}, {1}), Tensor::from_vector<int32_t>({0}, {})}));
    });
    EXPECT_THAT(what, HasSubstr("div: integer division by zero (-3 / 0)"));
    what = error_of([&] {
      values<uint8_t>(call1("div", {Tensor::from_vector<uint8_t>({200}, {1}),
                                    Tensor::from_vector<uint8_t>({0}, {1})}));
    });
    EXPECT_THAT(what, HasSubstr("integer division by zero (200 / 0)"));
    what = error_of([&] {
      values<int64_t>(call1("pow", {Tensor::from_vector<int64_t>({2, 0}, {2}),
                                    Tensor::from_vector<int64_t>({-1, -2}, {2})}));
    });
    EXPECT_THAT(what,
                HasSubstr("pow: integer division by zero (0 raised to the negative power -2)"));
  }
}

// Verifies that integer add, sub, mul, neg, abs, square and sum wrap around
// at the type's limits instead of overflowing (undefined behaviour, which
// the ASan build's UBSan reports).
TEST(IntegerArithmeticTest, OverflowWrapsAround) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kLowest = std::numeric_limits<int64_t>::lowest();
  Tensor max = Tensor::from_vector<int64_t>({kMax, kMax}, {2});
  Tensor one = Tensor::from_vector<int64_t>({1}, {});
  EXPECT_EQ(values<int64_t>(call1("add", {max, one})), (std::vector<int64_t>{kLowest, kLowest}));
  EXPECT_EQ(
      values<int64_t>(call1("sub", {call1("neg", {max}), Tensor::from_vector<int64_t>({2}, {})})),
      (std::vector<int64_t>{kMax, kMax}));
  EXPECT_EQ(values<int64_t>(call1("mul", {max, Tensor::from_vector<int64_t>({2}, {})})),
            (std::vector<int64_t>{-2, -2}));
  Tensor lowest = Tensor::from_vector<int32_t>({std::numeric_limits<int32_t>::lowest()}, {1});
  EXPECT_EQ(values<int32_t>(call1("neg", {lowest})), values<int32_t>(lowest));
  EXPECT_EQ(values<int32_t>(call1("abs", {lowest})), values<int32_t>(lowest));
  EXPECT_EQ(values<int32_t>(call1("square", {Tensor::from_vector<int32_t>({65536}, {1})})),
            (std::vector<int32_t>{0}));
  EXPECT_EQ(values<int64_t>(call1("sum", {max})), (std::vector<int64_t>{-2}));
  // Powers are exact where a double (53 bits) is not, and wrap beyond.
  EXPECT_EQ(values<int64_t>(call1("pow", {Tensor::from_vector<int64_t>({3, 2}, {2}),
                                          Tensor::from_vector<int64_t>({39, 64}, {2})})),
            (std::vector<int64_t>{4052555153018976267, 0}));
}

}  // namespace
}  // namespace tandem::kernels::testing
