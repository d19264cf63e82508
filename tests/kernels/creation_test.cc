// Rows for creation.cc, its error messages, and the statistics and
// determinism of its random ops.
#include <algorithm>
#include <cmath>
#include <cstdint>

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

// A row of rand or randn: a sample of `count` values, checked as draws of
// `moments` (and, by the runner, for its shape, dtype and seeding).
OpTestCase random_row(std::string op, std::string name, DType dtype, int64_t count, int64_t seed,
                      Moments moments) {
  return {.name = std::move(name),
          .op = std::move(op),
          .attrs = {{"shape", Ints{count / 10, 10}}, {"dtype", dtype}, {"seed", seed}},
          .expected_shapes = {{Shape{count / 10, 10}, dtype}},
          .check_random =
              [moments, op](const Inputs&, const std::vector<Tensor>& out) {
                std::vector<double> values = values_of(out[0]);
                expect_moments(values, moments);
                if (op == "rand") {
                  for (double v : values) ASSERT_TRUE(v >= 0 && v < 1) << v;
                }
              },
          .check_gradient = false};
}

// dropout's outputs (y, mask) for x and p in training: each mask element is
// 0 or exactly 1 / (1 - p), kept with probability 1 - p, and y = x * mask.
void check_dropout(const Inputs& in, const std::vector<Tensor>& out, double p) {
  std::vector<double> x = values_of(in[0]), y = values_of(out[0]), mask = values_of(out[1]);
  ASSERT_EQ(mask.size(), x.size());
  const double scale =
      in[0].dtype() == DType::kFloat32 ? static_cast<float>(1 / (1 - p)) : 1 / (1 - p);
  std::vector<double> kept(mask.size());
  for (size_t i = 0; i < mask.size(); ++i) {
    ASSERT_TRUE(mask[i] == 0 || mask[i] == scale) << "mask element " << i << " is " << mask[i];
    kept[i] = mask[i] != 0;
    ASSERT_NEAR(y[i], x[i] * mask[i], 1e-6 * (1 + std::abs(x[i] * mask[i]))) << "element " << i;
  }
  expect_moments(kept, bernoulli(1 - p));
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

  // 10^4 draws: the moments within a few percent (expect_moments).
  rows.push_back(random_row("rand", "float32", DType::kFloat32, 10000, 1, kUniform01));
  rows.push_back(random_row("rand", "float16", DType::kFloat16, 10000, 2, kUniform01));
  rows.push_back(random_row("randn", "float64", DType::kFloat64, 10000, 3, kStandardNormal));
  rows.push_back(random_row("randn", "bfloat16", DType::kBFloat16, 10000, 4, kStandardNormal));

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
  Tensor small = random_tensor({5, 8}, 2);
  rows.push_back(
      {.name = "training_gradient",
       .op = "dropout",
       .inputs = {small},
       .attrs = {{"p", 0.4}, {"seed", int64_t{6}}},
       .expected_shapes = {{small.shape(), DType::kFloat64}, {small.shape(), DType::kFloat64}},
       .check_random = [](const Inputs& in, const std::vector<Tensor>& out) {
         check_dropout(in, out, 0.4);
       }});
  // A large sample of the mask, in float32.
  Tensor large = random_tensor({100, 100}, 3, -1, 1, DType::kFloat32);
  rows.push_back(
      {.name = "training_f32",
       .op = "dropout",
       .inputs = {large},
       .attrs = {{"p", 0.25}, {"seed", int64_t{7}}},
       .expected_shapes = {{large.shape(), DType::kFloat32}, {large.shape(), DType::kFloat32}},
       .check_random = [](const Inputs& in,
                          const std::vector<Tensor>& out) { check_dropout(in, out, 0.25); },
       .check_gradient = false});
  return rows;
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
    expect_moments(u, kUniform01);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0);
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0);
    std::vector<double> z = draw("randn", 8, dtype);
    expect_moments(z, kStandardNormal);
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
