// Table rows for op tests: each op family's
// test file lists rows {op, inputs, attrs, reference, tolerance}; one generic
// runner (op_table_test.cc) checks every row's forward result against its
// independent reference and its gradient against central finite differences
// in float64, and fails when a registered op has no row, or a differentiable
// op no row whose gradient check checks a float64 input.
//
//   TANDEM_OP_TEST_ROWS(elementwise_binary) {
//     return {
//         {.name = "broadcast", .op = "add",
//          .inputs = {random_f64({2, 3}, 1), random_f64({3}, 2)},
//          .reference = [](const Inputs& in) { return map2(in[0], in[1], std::plus<>()); }},
//     };
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/error.h"
#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"
#include "tests/error_of.h"

namespace tandem::kernels::testing {

using tandem::testing::error_of;

using Inputs = std::vector<Tensor>;

struct OpTestCase {
  std::string name;  // Unique within the op; becomes part of the test name.
  std::string op;
  Inputs inputs = {};
  Attrs attrs = {};
  // Expected outputs, computed independently of the kernel under test (plain
  // loops over host values). Null only for ops whose values are random;
  // such a row gives `expected_shapes` and `check_random` instead.
  std::function<std::vector<Tensor>(const Inputs&)> reference = {};
  double tolerance = 1e-6;  // |actual - expected| <= tolerance * (1 + |expected|)
  // The outputs' shapes and dtypes, checked when given (and required without
  // a reference).
  std::vector<TensorMeta> expected_shapes = {};
  // For random ops: checks the outputs' values as a sample (expect_moments
  // below), on every device the row runs on. The runner also checks that
  // the op's "seed" attribute decides the values: the same seed gives the
  // same outputs, the next seed different ones.
  std::function<void(const Inputs&, const std::vector<Tensor>&)> check_random = {};
  // Finite-difference check of the op's gradient; needs float64 inputs: a
  // row that checks a gradient and has none fails.
  bool check_gradient = true;
  std::vector<int> grad_inputs = {};  // Inputs to check; empty: every float64 input.
  double grad_tolerance = 1e-5;
};

// The inputs whose gradients a row checks: `grad_inputs`, or every float64
// input; empty when the row checks no gradient.
std::vector<int> gradient_checked_inputs(const OpTestCase& row);

using RowsFn = std::vector<OpTestCase> (*)();

bool register_op_rows(const char* family, RowsFn rows);
const std::vector<std::pair<std::string, RowsFn>>& registered_row_families();

// A row whose reference gives a single output, checking the gradient when
// an input is float64.
OpTestCase row(std::string op, std::string name, Inputs inputs, Attrs attrs,
               std::function<Tensor(const Inputs&)> reference);

// Tensors for rows.
Tensor tensor_of(std::vector<double> values, Shape shape, DType dtype = DType::kFloat64);
// Uniform in [low, high), deterministic in `seed`.
Tensor random_tensor(Shape shape, uint64_t seed, double low = -1, double high = 1,
                     DType dtype = DType::kFloat64);
// Values of any numeric or bool tensor, on any device, as doubles (waits
// for it).
std::vector<double> values_of(const Tensor& t);
// `t` copied to `device` (itself if it is there, or undefined).
Tensor on_device(const Tensor& t, Device device);
// A float64 tensor of `shape` with `values` (for references).
Tensor result(std::vector<double> values, Shape shape, DType dtype = DType::kFloat64);

// Appends `row` (float64, gradient checked) and a float32 copy of it
// (forward only, with `f32_tolerance`): the float32 path is the fast one,
// the float64 one is what finite differences can check.
void add_both(std::vector<OpTestCase>& rows, OpTestCase row, double f32_tolerance = 1e-5);

// The first four moments of a distribution, for expect_moments.
struct Moments {
  double mean;
  double variance;
  double fourth;  // E[(x - mean)^4], which sets how much the sample variance varies.
};
inline constexpr Moments kUniform01{.mean = 0.5, .variance = 1.0 / 12, .fourth = 1.0 / 80};
inline constexpr Moments kStandardNormal{.mean = 0, .variance = 1, .fourth = 3};
// The moments of a draw that is 1 with probability p and 0 otherwise.
Moments bernoulli(double p);

// Expects the sample mean and variance of `samples` to match `m` within
// 6 standard errors of each estimate, sqrt(variance / n) for the mean and
// sqrt((fourth - variance^2) / n) for the variance: a bound that tightens
// with the sample size, so a small sample checks loosely and a large one
// closely (a test with a fixed seed fails by chance with odds below 1e-8).
void expect_moments(const std::vector<double>& samples, const Moments& m);

// Reference helpers: tensors read and built by multi-index, in row-major order.
using Index = std::vector<int64_t>;
// A tensor's values on the host, read by multi-index.
struct HostTensor {
  explicit HostTensor(const Tensor& t);
  double at(const Index& index) const;
  Shape shape;
  std::vector<double> values;
};
// Calls f with every multi-index of `shape`, in row-major order.
void for_each_index(const Shape& shape, const std::function<void(const Index&)>& f);
// A tensor of `shape` whose element at each multi-index is f(index).
Tensor build(const Shape& shape, DType dtype, const std::function<double(const Index&)>& f);

// Reference helpers: elementwise maps over one or two broadcast operands.
Tensor map1(const Tensor& a, const std::function<double(double)>& f, DType dtype = DType::kFloat64);
Tensor map2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f,
            DType dtype = DType::kFloat64);

// An activation conv2d and linear can fuse (Note [Fused activation] in
// kernels/cpu/onednn.h), with the "alpha" a layer takes for it.
struct ActivationCase {
  std::string name;
  double alpha = 0.01;
  std::string param = {};  // The op's parameter that alpha sets; empty if none.
};
// Every such activation: each elementwise op with a PostOp, those with a
// parameter at a value other than its default.
std::vector<ActivationCase> fused_activations();

// `attrs` with the activation set.
Attrs with_activation(Attrs attrs, const ActivationCase& a);
// `row` with its layer's activation fused: the reference applies the
// standalone op of the same name to the unfused reference. Fused layers have
// no gradient (it would need the pre-activation values).
OpTestCase activated(OpTestCase row, const ActivationCase& a);

}  // namespace tandem::kernels::testing

#define TANDEM_OP_TEST_ROWS(family)                                            \
  std::vector<::tandem::kernels::testing::OpTestCase> family##_op_rows();      \
  [[maybe_unused]] static const bool family##_op_rows_registered =             \
      ::tandem::kernels::testing::register_op_rows(#family, family##_op_rows); \
  std::vector<::tandem::kernels::testing::OpTestCase> family##_op_rows()
