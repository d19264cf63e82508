// Rows for creation.cc, its error messages, and the statistics and
// determinism of its random ops.
#include <cmath>
#include <cstdint>
#include <numeric>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

OpTestCase created(std::string op, std::string name, Attrs attrs, Tensor expected) {
  return {.name = std::move(name),
          .op = std::move(op),
          .attrs = std::move(attrs),
          .reference = [expected](const Inputs&) { return std::vector{expected}; },
          .check_gradient = false};
}

Tensor filled(Shape shape, double value, DType dtype) {
  return result(std::vector<double>(shape.numel(), value), shape, dtype);
}

// Random rows run the op (the runner checks nothing without a reference);
// the TESTs below check shapes, determinism and statistics.
OpTestCase random_row(std::string op, std::string name, Attrs attrs) {
  return {.name = std::move(name),
          .op = std::move(op),
          .attrs = std::move(attrs),
          .check_gradient = false};
}

TANDEM_OP_TEST_ROWS(creation) {
  std::vector<OpTestCase> rows;
  rows.push_back(
      created("zeros", "float32", {{"shape", Ints{2, 3}}}, filled({2, 3}, 0, DType::kFloat32)));
  rows.push_back(created("zeros", "bool_empty", {{"shape", Ints{0, 4}}, {"dtype", DType::kBool}},
                         filled({0, 4}, 0, DType::kBool)));
  rows.push_back(created("ones", "int64_scalar", {{"shape", Ints{}}, {"dtype", DType::kInt64}},
                         filled({}, 1, DType::kInt64)));
  rows.push_back(created("ones", "bfloat16", {{"shape", Ints{3}}, {"dtype", DType::kBFloat16}},
                         filled({3}, 1, DType::kBFloat16)));
  rows.push_back(created("full", "float64",
                         {{"shape", Ints{2, 2}}, {"dtype", DType::kFloat64}, {"value", -2.5}},
                         filled({2, 2}, -2.5, DType::kFloat64)));
  rows.push_back(
      created("full", "default_value", {{"shape", Ints{2}}}, filled({2}, 0, DType::kFloat32)));
  rows.push_back(created("full", "int32_from_int_attr",
                         {{"shape", Ints{3}}, {"dtype", DType::kInt32}, {"value", int64_t{7}}},
                         filled({3}, 7, DType::kInt32)));
  rows.push_back(created("full", "float16",
                         {{"shape", Ints{2}}, {"dtype", DType::kFloat16}, {"value", 0.75}},
                         filled({2}, 0.75, DType::kFloat16)));

  rows.push_back(created("arange", "stop_only", {{"stop", 5.0}},
                         result({0, 1, 2, 3, 4}, {5}, DType::kFloat32)));
  rows.push_back(
      created("arange", "fractional_step",
              {{"start", 1.0}, {"stop", 2.0}, {"step", 0.25}, {"dtype", DType::kFloat64}},
              result({1, 1.25, 1.5, 1.75}, {4})));
  rows.push_back(created("arange", "negative_step_int64",
                         {{"start", int64_t{5}},
                          {"stop", int64_t{-3}},
                          {"step", int64_t{-3}},
                          {"dtype", DType::kInt64}},
                         result({5, 2, -1}, {3}, DType::kInt64)));
  rows.push_back(created("arange", "empty", {{"start", 3.0}, {"stop", 1.0}},
                         result({}, {0}, DType::kFloat32)));

  rows.push_back(random_row("rand", "float32", {{"shape", Ints{4, 5}}, {"seed", int64_t{1}}}));
  rows.push_back(random_row(
      "rand", "float16", {{"shape", Ints{8}}, {"dtype", DType::kFloat16}, {"seed", int64_t{2}}}));
  rows.push_back(
      random_row("randn", "float64",
                 {{"shape", Ints{3, 3}}, {"dtype", DType::kFloat64}, {"seed", int64_t{3}}}));

  // dropout: outputs (y, mask). Evaluation and p = 0 are deterministic.
  Tensor x = random_tensor({3, 4}, 1);
  rows.push_back({.name = "not_training",
                  .op = "dropout",
                  .inputs = {x},
                  .attrs = {{"p", 0.3}, {"training", false}, {"seed", int64_t{5}}},
                  .reference = [](const Inputs& in) {
                    return std::vector{in[0], filled(in[0].shape(), 1, DType::kFloat64)};
                  }});
  rows.push_back({.name = "p_zero",
                  .op = "dropout",
                  .inputs = {x},
                  .attrs = {{"p", 0.0}, {"seed", int64_t{5}}},
                  .reference = [](const Inputs& in) {
                    return std::vector{in[0], filled(in[0].shape(), 1, DType::kFloat64)};
                  }});
  // Training with a fixed seed: a fixed mask, so finite differences apply.
  rows.push_back({.name = "training_gradient",
                  .op = "dropout",
                  .inputs = {random_tensor({5, 8}, 2)},
                  .attrs = {{"p", 0.4}, {"seed", int64_t{6}}}});
  return rows;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double variance(const std::vector<double>& v) {
  double m = mean(v), sum = 0;
  for (double x : v) sum += (x - m) * (x - m);
  return sum / static_cast<double>(v.size());
}

std::vector<double> draw(const char* op, int64_t seed, DType dtype = DType::kFloat32,
                         int64_t n = 100000) {
  Tensor t = call1(op, {}, {{"shape", Ints{n}}, {"dtype", dtype}, {"seed", seed}});
  EXPECT_EQ(t.shape(), Shape{n});
  EXPECT_EQ(t.dtype(), dtype);
  return values_of(t);
}

// Verifies that creation ops take no inputs and run on the CPU.
TEST(CreationOpsTest, NoInputsCpuOutput) {
  Tensor t = call1("zeros", {}, {{"shape", Ints{2}}});
  EXPECT_TRUE(t.device().is_cpu());
  std::string what = error_of([] { call("ones", {tensor_of({1}, {1})}, {{"shape", Ints{1}}}); });
  EXPECT_THAT(what, HasSubstr("ones"));
  EXPECT_THAT(what, HasSubstr("expects 0 inputs, got 1"));
}

// Verifies the attribute checks: shapes, arange's step and count, dtypes.
TEST(CreationOpsTest, AttributeErrors) {
  std::string what = error_of([] { call("zeros", {}, {{"shape", Ints{2, -1}}}); });
  EXPECT_THAT(what, HasSubstr("zeros"));
  EXPECT_THAT(what, HasSubstr("negative dimension at axis 1"));
  what = error_of([] { call("full", {}, {}); });
  EXPECT_THAT(what, HasSubstr("missing required attribute 'shape'"));
  what = error_of([] { call("arange", {}, {{"stop", 3.0}, {"step", 0.0}}); });
  EXPECT_THAT(what, HasSubstr("arange"));
  EXPECT_THAT(what, HasSubstr("step must not be 0"));
  what = error_of([] { call("arange", {}, {{"stop", 1e30}}); });
  EXPECT_THAT(what, HasSubstr("1e+30 elements"));
  what = error_of([] { call("arange", {}, {{"stop", INFINITY}}); });
  EXPECT_THAT(what, HasSubstr("must be finite"));
  what = error_of([] { call("arange", {}, {{"start", 1.0}}); });
  EXPECT_THAT(what, HasSubstr("missing required attribute 'stop'"));
  what = error_of([] {
    call("rand", {}, {{"shape", Ints{2}}, {"dtype", DType::kInt32}, {"seed", int64_t{1}}});
  });
  EXPECT_THAT(what, HasSubstr("rand"));
  EXPECT_THAT(what, HasSubstr("floating point, got int32"));
  what = error_of([] { call("randn", {}, {{"shape", Ints{2}}}); });
  EXPECT_THAT(what, HasSubstr("missing required attribute 'seed'"));
}

// Verifies that dropout checks p and the input dtype.
TEST(CreationOpsTest, DropoutErrors) {
  Tensor x = random_tensor({4}, 1);
  std::string what = error_of([&] { call("dropout", {x}, {{"p", 1.0}, {"seed", int64_t{1}}}); });
  EXPECT_THAT(what, HasSubstr("dropout"));
  EXPECT_THAT(what, HasSubstr("p must be in [0, 1), got 1"));
  what = error_of([&] { call("dropout", {x}, {{"p", -0.1}, {"seed", int64_t{1}}}); });
  EXPECT_THAT(what, HasSubstr("got -0.1"));
  what = error_of([] {
    call("dropout", {tensor_of({1, 2}, {2}, DType::kInt64)}, {{"seed", int64_t{1}}});
  });
  EXPECT_THAT(what, HasSubstr("int64"));
}

// Verifies that random values are a function of the seed alone, and differ
// between seeds (including neighbouring ones).
TEST(CreationOpsTest, RandomOpsAreDeterministicInSeed) {
  for (const char* op : {"rand", "randn"}) {
    SCOPED_TRACE(op);
    std::vector<double> a = draw(op, 42, DType::kFloat32, 1000);
    EXPECT_EQ(a, draw(op, 42, DType::kFloat32, 1000));
    std::vector<double> b = draw(op, 43, DType::kFloat32, 1000);
    int same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
    EXPECT_LT(same, 10);
    // A prefix does not depend on the total size.
    std::vector<double> shorter = draw(op, 42, DType::kFloat32, 10);
    EXPECT_EQ(shorter, std::vector<double>(a.begin(), a.begin() + 10));
  }
}

// Verifies the moments of rand (mean 1/2, variance 1/12, all in [0, 1)) and
// randn (mean 0, variance 1) over 10^5 draws, for each floating dtype.
TEST(CreationOpsTest, RandomOpsHaveTheRightMoments) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<double> u = draw("rand", 7, dtype);
    EXPECT_NEAR(mean(u), 0.5, 0.01);
    EXPECT_NEAR(variance(u), 1.0 / 12, 0.01);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
    std::vector<double> z = draw("randn", 8, dtype);
    EXPECT_NEAR(mean(z), 0.0, 0.02);
    EXPECT_NEAR(variance(z), 1.0, 0.03);
    int beyond_3_sigma = 0;
    for (double v : z) beyond_3_sigma += std::abs(v) > 3;
    EXPECT_NEAR(beyond_3_sigma / 1e5, 0.0027, 0.001);  // Tails present, not too heavy.
  }
}

// Verifies that dropout zeros about p of the elements, scales the rest by
// 1 / (1 - p), returns that scale as its mask, and is deterministic in seed.
TEST(CreationOpsTest, DropoutZerosAboutPAndScales) {
  constexpr int64_t n = 100000;
  Tensor x = call1("full", {}, {{"shape", Ints{n}}, {"value", 2.0}});
  Attrs attrs{{"p", 0.25}, {"seed", int64_t{9}}};
  std::vector<Tensor> out = call("dropout", {x}, attrs);
  ASSERT_EQ(out.size(), 2u);
  std::vector<double> y = values_of(out[0]), mask = values_of(out[1]);
  int64_t zeros = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (mask[i] == 0) {
      ++zeros;
      EXPECT_EQ(y[i], 0);
    } else {
      ASSERT_FLOAT_EQ(mask[i], 1 / 0.75);
      ASSERT_FLOAT_EQ(y[i], 2 / 0.75);
    }
  }
  EXPECT_NEAR(static_cast<double>(zeros) / n, 0.25, 0.01);
  EXPECT_EQ(values_of(call("dropout", {x}, attrs)[1]), mask);
  attrs.set("seed", int64_t{10});
  EXPECT_NE(values_of(call("dropout", {x}, attrs)[1]), mask);
}

}  // namespace
}  // namespace tandem::kernels::testing
