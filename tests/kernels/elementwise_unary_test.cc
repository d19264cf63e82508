// Rows for elementwise_unary.cc, and its error messages and cast semantics.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/error.h"
#include "kernels/broadcast.h"
#include "kernels/dispatch.h"
#include "kernels/element_cast.h"
#include "kernels/registry.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();

// Forward against f elementwise; the output keeps the input's dtype.
OpTestCase unary_row(std::string op, std::string name, Tensor x, std::function<double(double)> f,
                     Attrs attrs = {}) {
  DType dtype = x.dtype();
  return {.name = std::move(name),
          .op = std::move(op),
          .inputs = {std::move(x)},
          .attrs = std::move(attrs),
          .reference = [f, dtype](const Inputs& in) { return std::vector{map1(in[0], f, dtype)}; },
          .check_gradient = dtype == DType::kFloat64};
}

Tensor as(DType dtype, const Tensor& t) { return tensor_of(values_of(t), t.shape(), dtype); }

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double gelu(double x) { return x * 0.5 * (1 + std::erf(x / std::numbers::sqrt2)); }
double sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }

// cond ? a : b over the broadcast of all three, by plain index arithmetic.
Tensor where_reference(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape()), b.shape());
  const Tensor* ins[3] = {&cond, &a, &b};
  std::vector<double> values[3];
  Strides strides[3];
  for (int k = 0; k < 3; ++k) {
    values[k] = values_of(*ins[k]);
    strides[k] = broadcast_strides(ins[k]->shape(), shape);
  }
  std::vector<double> out(shape.numel());
  for (int64_t i = 0; i < shape.numel(); ++i) {
    int64_t rest = i, at[3] = {0, 0, 0};
    for (int axis = shape.rank() - 1; axis >= 0; --axis) {
      int64_t index = rest % shape[axis];
      rest /= shape[axis];
      for (int k = 0; k < 3; ++k) at[k] += index * strides[k][axis];
    }
    out[i] = values[0][at[0]] != 0 ? values[1][at[1]] : values[2][at[2]];
  }
  return result(std::move(out), shape, a.dtype());
}

TANDEM_OP_TEST_ROWS(elementwise_unary) {
  std::vector<OpTestCase> rows;
  // Values away from 0, where abs, sign, relu and leaky_relu have kinks.
  Tensor off_zero = tensor_of({-1.7, -0.8, -0.3, 0.2, 0.6, 1.4}, {2, 3});
  Tensor positive = random_tensor({2, 3}, 1, 0.5, 2);
  Tensor ints32 = tensor_of({-5, -1, 0, 3, 7, 100}, {2, 3}, DType::kInt32);
  Tensor ints64 = tensor_of({-5, -1, 0, 3, 7, 100}, {2, 3}, DType::kInt64);

  struct Floating {
    const char* op;
    std::function<double(double)> f;
    Tensor x;
  };
  std::vector<Floating> floating = {
      {"exp", [](double x) { return std::exp(x); }, random_tensor({2, 3}, 2, -2, 2)},
      {"log", [](double x) { return std::log(x); }, positive},
      {"sqrt", [](double x) { return std::sqrt(x); }, positive},
      {"rsqrt", [](double x) { return 1 / std::sqrt(x); }, positive},
      {"tanh", [](double x) { return std::tanh(x); }, random_tensor({2, 3}, 3, -2, 2)},
      {"sigmoid", sigmoid, random_tensor({2, 3}, 4, -4, 4)},
      {"erf", [](double x) { return std::erf(x); }, random_tensor({2, 3}, 5, -2, 2)},
      {"gelu", gelu, random_tensor({2, 3}, 6, -3, 3)},
  };
  for (const auto& [op, f, x] : floating) {
    rows.push_back(unary_row(op, "float64", x, f));
    rows.push_back(unary_row(op, "float32", as(DType::kFloat32, x), f));
  }
  // Large and empty inputs: the random-direction gradient path, and no work.
  rows.push_back(unary_row("tanh", "large", random_tensor({8, 9}, 7, -2, 2),
                           [](double x) { return std::tanh(x); }));
  rows.push_back(
      unary_row("exp", "empty", random_tensor({0, 3}, 8), [](double x) { return std::exp(x); }));
  rows.push_back(
      unary_row("exp", "scalar", random_tensor({}, 9), [](double x) { return std::exp(x); }));
  // Sigmoid at extremes must not overflow to NaN.
  OpTestCase extreme =
      unary_row("sigmoid", "extremes", tensor_of({-1000, -40, 40, 1000}, {4}), sigmoid);
  extreme.check_gradient = false;
  rows.push_back(extreme);

  struct Signed {
    const char* op;
    std::function<double(double)> f;
  };
  std::vector<Signed> signed_ops = {
      {"neg", [](double x) { return -x; }},
      {"abs", [](double x) { return std::abs(x); }},
      {"sign", sign},
      {"square", [](double x) { return x * x; }},
      {"relu", [](double x) { return std::max(x, 0.0); }},
  };
  for (const auto& [op, f] : signed_ops) {
    rows.push_back(unary_row(op, "float64", off_zero, f));
    rows.push_back(unary_row(op, "float32", as(DType::kFloat32, off_zero), f));
    rows.push_back(unary_row(op, "int32", ints32, f));
    rows.push_back(unary_row(op, "int64", ints64, f));
  }

  rows.push_back(unary_row("leaky_relu", "default_alpha", off_zero,
                           [](double x) { return x >= 0 ? x : 0.01 * x; }));
  rows.push_back(unary_row("leaky_relu", "alpha", off_zero,
                           [](double x) { return x >= 0 ? x : 0.2 * x; }, {{"alpha", 0.2}}));
  rows.push_back(unary_row("leaky_relu", "float32", as(DType::kFloat32, off_zero),
                           [](double x) { return x >= 0 ? x : 0.2 * x; }, {{"alpha", 0.2}}));

  // Bounds away from the inputs, where the gradient jumps.
  auto clip = [](double lo, double hi) {
    return [lo, hi](double x) { return std::min(std::max(x, lo), hi); };
  };
  rows.push_back(
      unary_row("clip", "both", off_zero, clip(-0.5, 0.5), {{"min", -0.5}, {"max", 0.5}}));
  rows.push_back(unary_row("clip", "min_only", off_zero, clip(0, kInf), {{"min", 0.0}}));
  rows.push_back(unary_row("clip", "max_only", off_zero, clip(-kInf, 1), {{"max", 1.0}}));
  rows.push_back(unary_row("clip", "none", off_zero, clip(-kInf, kInf)));
  rows.push_back(unary_row("clip", "float32", as(DType::kFloat32, off_zero), clip(-0.5, 0.5),
                           {{"min", -0.5}, {"max", 0.5}}));
  rows.push_back(unary_row("clip", "int32_rounds_bounds_inward", ints32, clip(-2, 5),
                           {{"min", -2.5}, {"max", 5.5}}));
  rows.push_back(
      unary_row("clip", "int64", ints64, clip(0, 10), {{"min", int64_t{0}}, {"max", 10.0}}));

  // Trigonometric and hyperbolic functions, each inside its domain, and the
  // inverse hyperbolic ones near 0 where a log-based shortcut would lose
  // every digit.
  Tensor unit = random_tensor({2, 3}, 12, -0.9, 0.9);
  Tensor tiny = tensor_of({-3e-9, -1e-12, 1e-15, 2e-10, 5e-8, 1e-300}, {2, 3});
  std::vector<Floating> more = {
      {"sin", [](double x) { return std::sin(x); }, random_tensor({2, 3}, 13, -3, 3)},
      {"cos", [](double x) { return std::cos(x); }, random_tensor({2, 3}, 14, -3, 3)},
      {"tan", [](double x) { return std::tan(x); }, random_tensor({2, 3}, 15, -1.2, 1.2)},
      {"asin", [](double x) { return std::asin(x); }, unit},
      {"acos", [](double x) { return std::acos(x); }, unit},
      {"atan", [](double x) { return std::atan(x); }, random_tensor({2, 3}, 16, -4, 4)},
      {"sinh", [](double x) { return std::sinh(x); }, random_tensor({2, 3}, 17, -3, 3)},
      {"cosh", [](double x) { return std::cosh(x); }, random_tensor({2, 3}, 18, -3, 3)},
      {"asinh", [](double x) { return std::asinh(x); }, random_tensor({2, 3}, 19, -5, 5)},
      {"acosh", [](double x) { return std::acosh(x); }, random_tensor({2, 3}, 20, 1.2, 4)},
      {"atanh", [](double x) { return std::atanh(x); }, unit},
      {"reciprocal", [](double x) { return 1 / x; }, positive},
      {"softsign", [](double x) { return x / (1 + std::abs(x)); }, off_zero},
      {"hardsigmoid", [](double x) { return std::clamp(x + 3, 0.0, 6.0) / 6; },
       tensor_of({-4.5, -2.2, -0.4, 0.7, 2.9, 3.6}, {2, 3})},
      {"hardswish", [](double x) { return x * std::clamp(x + 3, 0.0, 6.0) / 6; },
       tensor_of({-4.5, -2.2, -0.4, 0.7, 2.9, 3.6}, {2, 3})},
      {"mish", [](double x) { return x * std::tanh(std::log1p(std::exp(x))); },
       random_tensor({2, 3}, 21, -4, 4)},
      {"silu", [](double x) { return x / (1 + std::exp(-x)); }, random_tensor({2, 3}, 22, -4, 4)},
      {"selu",
       [](double x) {
         return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * std::expm1(x));
       },
       off_zero},
      {"elu", [](double x) { return x > 0 ? x : std::expm1(x); }, off_zero},
      {"celu", [](double x) { return x > 0 ? x : std::expm1(x); }, off_zero},
      {"softplus", [](double x) { return std::log1p(std::exp(x)); },
       random_tensor({2, 3}, 23, -4, 4)},
  };
  for (const auto& [op, f, x] : more) {
    rows.push_back(unary_row(op, "float64", x, f));
    rows.push_back(unary_row(op, "float32", as(DType::kFloat32, x), f));
  }
  rows.push_back(unary_row("asinh", "near_zero", tiny, [](double x) { return std::asinh(x); }));
  rows.push_back(unary_row("atanh", "near_zero", tiny, [](double x) { return std::atanh(x); }));
  rows.push_back(unary_row("elu", "alpha", off_zero,
                           [](double x) { return x > 0 ? x : 0.5 * std::expm1(x); },
                           {{"alpha", 0.5}}));
  rows.push_back(unary_row("celu", "alpha", off_zero,
                           [](double x) { return x > 0 ? x : 0.5 * std::expm1(x / 0.5); },
                           {{"alpha", 0.5}}));
  // beta x above the threshold gives x itself.
  rows.push_back(unary_row("softplus", "beta_threshold", off_zero,
                           [](double x) { return 2 * x > 1 ? x : std::log1p(std::exp(2 * x)) / 2; },
                           {{"beta", 2.0}, {"threshold", 1.0}}));
  // Large inputs must not overflow to inf or NaN.
  OpTestCase large = unary_row("softplus", "large", tensor_of({-800, 30, 800}, {3}),
                               [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); });
  large.check_gradient = false;
  rows.push_back(large);

  // Rounding: away from integers (the gradient is zero), and at halves,
  // which go to the even neighbour.
  Tensor fractions = tensor_of({-2.7, -1.2, -0.4, 0.3, 1.6, 2.2}, {2, 3});
  std::vector<Floating> rounding = {
      {"floor", [](double x) { return std::floor(x); }, fractions},
      {"ceil", [](double x) { return std::ceil(x); }, fractions},
      {"round", [](double x) { return std::nearbyint(x); }, fractions},
      {"trunc", [](double x) { return std::trunc(x); }, fractions},
  };
  for (const auto& [op, f, x] : rounding) {
    rows.push_back(unary_row(op, "float64", x, f));
    rows.push_back(unary_row(op, "float32", as(DType::kFloat32, x), f));
  }
  OpTestCase halves =
      unary_row("round", "halves_to_even", tensor_of({-2.5, -1.5, -0.5, 0.5, 1.5, 2.5}, {2, 3}),
                [](double x) { return std::nearbyint(x); });
  halves.check_gradient = false;
  rows.push_back(halves);

  // Tests and logic give bool (no gradient).
  auto bool_row = [](std::string op, std::string name, Tensor x, std::function<bool(double)> f) {
    return OpTestCase{.name = std::move(name),
                      .op = std::move(op),
                      .inputs = {std::move(x)},
                      .reference =
                          [f](const Inputs& in) {
                            return std::vector{map1(
                                in[0], [f](double v) { return f(v) ? 1.0 : 0.0; }, DType::kBool)};
                          },
                      .check_gradient = false};
  };
  Tensor special = tensor_of({NAN, kInf, -kInf, 0, -1.5, 3}, {2, 3});
  auto is_nan = [](double x) { return std::isnan(x); };
  auto is_inf = [](double x) { return std::isinf(x); };
  auto is_zero = [](double x) { return x == 0; };
  rows.push_back(bool_row("isnan", "float64", special, is_nan));
  rows.push_back(bool_row("isnan", "float32", as(DType::kFloat32, special), is_nan));
  rows.push_back(bool_row("isinf", "float64", special, is_inf));
  rows.push_back(bool_row("isinf", "float32", as(DType::kFloat32, special), is_inf));
  rows.push_back(bool_row("logical_not", "float64", special, is_zero));
  rows.push_back(bool_row("logical_not", "int32", ints32, is_zero));
  rows.push_back(bool_row("logical_not", "bool", tensor_of({1, 0, 1}, {3}, DType::kBool), is_zero));
  rows.push_back(bool_row("logical_not", "float16", as(DType::kFloat16, off_zero), is_zero));

  // bitwise_not: two's complement for integers, not for bool.
  auto bits_row = [](std::string name, Tensor x, std::function<double(double)> f) {
    DType dtype = x.dtype();
    return OpTestCase{
        .name = std::move(name),
        .op = "bitwise_not",
        .inputs = {std::move(x)},
        .reference = [f, dtype](const Inputs& in) { return std::vector{map1(in[0], f, dtype)}; },
        .check_gradient = false};
  };
  auto complement = [](double x) { return -x - 1; };
  rows.push_back(bits_row("int32", ints32, complement));
  rows.push_back(bits_row("int64", ints64, complement));
  rows.push_back(bits_row("uint8", tensor_of({0, 1, 200, 255}, {4}, DType::kUInt8),
                          [](double x) { return 255 - x; }));
  rows.push_back(bits_row("bool", tensor_of({1, 0, 1}, {3}, DType::kBool),
                          [](double x) { return x == 0 ? 1.0 : 0.0; }));

  // cast: the reference gives the values the target dtype holds.
  auto cast_row = [](std::string name, Tensor x, DType to, std::function<double(double)> f) {
    bool gradient = x.dtype() == DType::kFloat64 && to == DType::kFloat64;
    return OpTestCase{
        .name = std::move(name),
        .op = "cast",
        .inputs = {std::move(x)},
        .attrs = {{"dtype", to}},
        .reference = [f, to](const Inputs& in) { return std::vector{map1(in[0], f, to)}; },
        .check_gradient = gradient};
  };
  auto same = [](double x) { return x; };
  auto round_f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  Tensor mixed = tensor_of({-2.75, -1.5, -0.25, 0, 0.5, 3.25}, {2, 3});
  rows.push_back(cast_row("float64_to_float64", random_tensor({2, 3}, 10), DType::kFloat64, same));
  rows.push_back(
      cast_row("float64_to_float32", random_tensor({2, 3}, 11), DType::kFloat32, round_f32));
  rows.push_back(cast_row("float32_to_float64", as(DType::kFloat32, mixed), DType::kFloat64, same));
  // Values exactly representable in 16 bits, so the reference is exact.
  rows.push_back(cast_row("float32_to_float16", as(DType::kFloat32, mixed), DType::kFloat16, same));
  rows.push_back(
      cast_row("float32_to_bfloat16", as(DType::kFloat32, mixed), DType::kBFloat16, same));
  rows.push_back(cast_row("float16_to_float64", as(DType::kFloat16, mixed), DType::kFloat64, same));
  rows.push_back(
      cast_row("bfloat16_to_float16", as(DType::kBFloat16, mixed), DType::kFloat16, same));
  rows.push_back(cast_row("float64_to_int32_truncates", mixed, DType::kInt32,
                          [](double x) { return std::trunc(x); }));
  // At the limits of the integer dtypes; one step beyond is an error
  // (CastOfValuesWithoutAnIntegerIsAnError below).
  auto truncate = [](double x) { return std::trunc(x); };
  rows.push_back(cast_row("float64_to_int64_limits",
                          tensor_of({-0x1p63, 0x1p63 - 1024, 42.9, -0.99}, {4}), DType::kInt64,
                          truncate));
  rows.push_back(cast_row("float64_to_int32_limits",
                          tensor_of({2147483647.9, -2147483648.9, -7.5}, {3}), DType::kInt32,
                          truncate));
  rows.push_back(cast_row("float32_to_int32_limits",
                          as(DType::kFloat32, tensor_of({-0x1p31, 0x1p31 - 128}, {2})),
                          DType::kInt32, truncate));
  rows.push_back(cast_row("float64_to_bool", tensor_of({0, -0.0, 0.5, NAN, -3}, {5}), DType::kBool,
                          [](double x) { return x != 0 ? 1.0 : 0.0; }));
  rows.push_back(cast_row("float64_to_uint8", tensor_of({0, 1, 254.5, 255.9, -0.5}, {5}),
                          DType::kUInt8, [](double x) { return std::trunc(x) + 0.0; }));
  rows.push_back(cast_row("int32_to_float64", ints32, DType::kFloat64, same));
  rows.push_back(cast_row("int64_to_int32", ints64, DType::kInt32, same));
  rows.push_back(
      cast_row("int32_to_bool", ints32, DType::kBool, [](double x) { return x != 0 ? 1.0 : 0.0; }));
  rows.push_back(
      cast_row("bool_to_float32", tensor_of({1, 0, 1}, {3}, DType::kBool), DType::kFloat32, same));
  rows.push_back(
      cast_row("uint8_to_int64", tensor_of({0, 7, 255}, {3}, DType::kUInt8), DType::kInt64, same));

  // where: broadcasting among all three operands.
  auto where_row = [](std::string name, Tensor cond, Tensor a, Tensor b) {
    bool gradient = a.dtype() == DType::kFloat64;
    return OpTestCase{
        .name = std::move(name),
        .op = "where",
        .inputs = {std::move(cond), std::move(a), std::move(b)},
        .reference =
            [](const Inputs& in) { return std::vector{where_reference(in[0], in[1], in[2])}; },
        .check_gradient = gradient};
  };
  Tensor cond = tensor_of({1, 0, 0, 1, 1, 0}, {2, 3}, DType::kBool);
  rows.push_back(
      where_row("same_shape", cond, random_tensor({2, 3}, 12), random_tensor({2, 3}, 13)));
  rows.push_back(where_row("broadcast_all", tensor_of({1, 0, 1}, {3, 1}, DType::kBool),
                           random_tensor({2, 1, 4}, 14), random_tensor({4}, 15)));
  rows.push_back(
      where_row("scalar_operand", cond, random_tensor({2, 3}, 16), random_tensor({}, 17)));
  rows.push_back(
      where_row("scalar_first_operand", cond, random_tensor({}, 20), random_tensor({2, 3}, 21)));
  rows.push_back(where_row("scalar_condition", tensor_of({0}, {}, DType::kBool),
                           random_tensor({2, 3}, 22), random_tensor({2, 3}, 23)));
  rows.push_back(where_row("int32", cond, ints32, tensor_of({9}, {1}, DType::kInt32)));
  rows.push_back(where_row("float32", cond, as(DType::kFloat32, random_tensor({2, 3}, 18)),
                           as(DType::kFloat32, random_tensor({3}, 19))));
  return rows;
}

// Verifies that a floating-only op refuses integers, naming the op and dtype.
TEST(ElementwiseUnaryTest, FloatingOpRefusesIntegers) {
  Tensor x = tensor_of({1, 2}, {2}, DType::kInt32);
  for (const char* op :
       {"exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "gelu", "leaky_relu"}) {
    std::string what = error_of([&] { call(op, {x}); });
    EXPECT_THAT(what, HasSubstr(op));
    EXPECT_THAT(what, HasSubstr("int32"));
  }
}

// Verifies that the integer-capable ops still refuse bool and uint8.
TEST(ElementwiseUnaryTest, SignedOpsRefuseBoolAndUint8) {
  std::string what = error_of([] { call("neg", {tensor_of({1, 0}, {2}, DType::kBool)}); });
  EXPECT_THAT(what, HasSubstr("neg"));
  EXPECT_THAT(what, HasSubstr("bool"));
  what = error_of([] { call("relu", {tensor_of({1, 0}, {2}, DType::kUInt8)}); });
  EXPECT_THAT(what, HasSubstr("uint8"));
}

// Verifies that clip refuses min > max, naming both bounds.
TEST(ElementwiseUnaryTest, ClipBoundsOutOfOrder) {
  std::string what = error_of([] {
    call("clip", {random_tensor({2}, 1)}, {{"min", 2.0}, {"max", -1.0}});
  });
  EXPECT_THAT(what, HasSubstr("clip"));
  EXPECT_THAT(what, HasSubstr("min=2"));
  EXPECT_THAT(what, HasSubstr("max=-1"));
}

// Verifies that cast needs its dtype attribute.
TEST(ElementwiseUnaryTest, CastNeedsDtype) {
  std::string what = error_of([] { call("cast", {random_tensor({2}, 1)}); });
  EXPECT_THAT(what, HasSubstr("cast"));
  EXPECT_THAT(what, HasSubstr("'dtype'"));
}

// Verifies that a floating value with no integer to go to (NaN, an
// infinity, or beyond the range after truncation) fails the cast naming the
// op, the element, its value and the dtype, where it gave 0 or INT_MIN
// silently; from every floating dtype, on both engines.
TEST(ElementwiseUnaryTest, CastOfValuesWithoutAnIntegerIsAnError) {
  struct Row {
    double value;
    DType to;
    const char* printed;
  };
  const Row rows[] = {
      {NAN, DType::kInt32, "nan"},
      {INFINITY, DType::kInt64, "inf"},
      {-INFINITY, DType::kUInt8, "-inf"},
      {1e300, DType::kInt32, "1e+300"},
      {-1e300, DType::kInt64, "-1e+300"},
      {0x1p63, DType::kInt64, "9.22337e+18"},
      {0x1p31, DType::kInt32, "2.14748e+09"},
      {-2147483649.0, DType::kInt32, "-2.14748e+09"},
      {256, DType::kUInt8, "256"},
      {-1, DType::kUInt8, "-1"},
  };
  for (engine::EngineKind kind : {engine::EngineKind::kThreaded, engine::EngineKind::kNaive}) {
    engine::configure(kind);
    for (const Row& row : rows) {
      for (DType from : {DType::kFloat64, DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
        // Values a 16-bit float holds: infinities, NaN, 256 and -1.
        bool narrow = from == DType::kFloat16 || from == DType::kBFloat16;
        if (narrow && std::isfinite(row.value) && row.value != 256 && row.value != -1) continue;
        // Values float32 rounds to others: 1e300 is inf there, -2^31 - 1 is -2^31.
        if (from == DType::kFloat32 && (std::abs(row.value) == 1e300 || row.value == -2147483649.0))
          continue;
        SCOPED_TRACE(str_cat(row.printed, " from ", dtype_name(from), " to ", dtype_name(row.to)));
        Tensor x = tensor_of({1, row.value, 2}, {3}, from);
        std::string what = error_of([&] { values_of(call1("cast", {x}, {{"dtype", row.to}})); });
        EXPECT_THAT(what, HasSubstr(str_cat("cast: cannot cast element 1 (", row.printed, ") to ",
                                            dtype_name(row.to),
                                            ": it is NaN, infinite or beyond "
                                            "the range of ",
                                            dtype_name(row.to))));
      }
    }
  }
  engine::configure(engine::EngineKind::kThreaded);
  // Far into a tensor large enough to split over the cores: the element is
  // still named by its index in the whole tensor.
  std::vector<double> values(300000, 1.5);
  values[299999] = NAN;
  std::string what = error_of([&] {
    values_of(
        call1("cast", {tensor_of(values, {300000}, DType::kFloat32)}, {{"dtype", DType::kInt32}}));
  });
  EXPECT_THAT(what, HasSubstr("cannot cast element 299999 (nan) to int32"));
}

// Verifies in_range (kernels/element_cast.h) one step either side of each
// integer dtype's limits, where truncation decides.
TEST(ElementwiseUnaryTest, InRangeAtTheIntegerLimits) {
  EXPECT_TRUE(in_range<int64_t>(-0x1p63));
  EXPECT_FALSE(in_range<int64_t>(0x1p63));
  EXPECT_TRUE(in_range<int64_t>(0x1p63 - 1024));
  EXPECT_FALSE(in_range<int64_t>(-0x1p63 - 2048));
  EXPECT_TRUE(in_range<int32_t>(-2147483648.9));
  EXPECT_FALSE(in_range<int32_t>(-2147483649.0));
  EXPECT_TRUE(in_range<int32_t>(2147483647.9));
  EXPECT_FALSE(in_range<int32_t>(2147483648.0));
  EXPECT_TRUE(in_range<int32_t>(-0x1p31f));  // -2^31 - 1 rounds to -2^31 in float.
  EXPECT_FALSE(in_range<int32_t>(0x1p31f));
  EXPECT_TRUE(in_range<uint8_t>(-0.9));
  EXPECT_FALSE(in_range<uint8_t>(-1.0));
  EXPECT_TRUE(in_range<uint8_t>(255.9));
  EXPECT_FALSE(in_range<uint8_t>(256.0));
  EXPECT_FALSE(in_range<int32_t>(NAN));
  EXPECT_FALSE(in_range<uint8_t>(Half(NAN)));
  EXPECT_TRUE(in_range<float>(1e300));  // Floating targets take anything (inf).
  EXPECT_TRUE(in_range<bool>(NAN));
}

// Verifies that where names a non-bool condition, mixed operand dtypes and
// shapes that do not broadcast.
TEST(ElementwiseUnaryTest, WhereChecksOperands) {
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 3}, 2);
  Tensor cond = tensor_of({1, 0, 1}, {3}, DType::kBool);
  std::string what = error_of([&] { call("where", {a, a, b}); });
  EXPECT_THAT(what, HasSubstr("where"));
  EXPECT_THAT(what, HasSubstr("condition must be bool, got float64"));
  what = error_of([&] { call("where", {cond, a, as(DType::kFloat32, b)}); });
  EXPECT_THAT(what, HasSubstr("float64 and float32"));
  what = error_of([&] { call("where", {cond, a, random_tensor({4}, 3)}); });
  EXPECT_THAT(what, HasSubstr("[2, 3]"));
  EXPECT_THAT(what, HasSubstr("[4]"));
}

// Verifies that a cast gradient exists between floating dtypes only.
TEST(ElementwiseUnaryTest, CastGradientOnlyBetweenFloatingTypes) {
  const OpDef& cast = Registry::global().get("cast");
  Tensor x = random_tensor({3}, 1);
  auto gradient_of = [&](const Tensor& input, DType to) {
    Attrs attrs{{"dtype", to}};
    std::vector<Tensor> outputs = call("cast", {input}, attrs);
    Tensor g = random_tensor(outputs[0].shape(), 2, -1, 1, DType::kFloat32);
    std::vector<Tensor> grads = cast.gradient({{input}, outputs, {g}, attrs});
    return grads[0];
  };
  Tensor back = gradient_of(x, DType::kFloat32);
  ASSERT_TRUE(back.defined());
  EXPECT_EQ(back.dtype(), DType::kFloat64);
  EXPECT_FALSE(gradient_of(x, DType::kInt32).defined());
  EXPECT_FALSE(gradient_of(tensor_of({1, 2, 3}, {3}, DType::kInt64), DType::kFloat32).defined());
}

// Verifies that sign's gradient is zeros, not undefined.
TEST(ElementwiseUnaryTest, SignGradientIsZeros) {
  const OpDef& sign = Registry::global().get("sign");
  Tensor x = random_tensor({4}, 1);
  std::vector<Tensor> outputs = call("sign", {x});
  std::vector<Tensor> grads = sign.gradient({{x}, outputs, {random_tensor({4}, 2)}, Attrs()});
  ASSERT_TRUE(grads[0].defined());
  EXPECT_EQ(values_of(grads[0]), std::vector<double>(4, 0.0));
}

}  // namespace
}  // namespace tandem::kernels::testing
