// The generic op tests: every row of every family (op_test_util.h) becomes
// two tests, its forward values against the row's reference and its
// gradient against central finite differences; and every registered op must
// have rows. Rows are built at start-up (they need tensors), so this file has
// its own main() that registers the tests before GoogleTest lists them.
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

bool close(double actual, double expected, double tolerance) {
  if (std::isnan(expected)) return std::isnan(actual);
  if (std::isinf(expected)) return actual == expected;
  return std::abs(actual - expected) <= tolerance * (1 + std::abs(expected));
}

void check_shapes(const OpTestCase& row, const std::vector<Tensor>& outputs) {
  ASSERT_EQ(outputs.size(), row.expected_shapes.size()) << "outputs";
  for (size_t k = 0; k < outputs.size(); ++k) {
    EXPECT_EQ(outputs[k].shape(), row.expected_shapes[k].shape) << "output " << k;
    EXPECT_EQ(dtype_name(outputs[k].dtype()), dtype_name(row.expected_shapes[k].dtype))
        << "output " << k;
  }
}

// A random op's values are a function of its "seed" attribute: the same seed
// gives the same outputs, the next one outputs that differ almost everywhere.
void check_seeding(const OpTestCase& row, const std::vector<Tensor>& outputs) {
  ASSERT_TRUE(row.attrs.has("seed")) << "a random row must set the seed";
  std::vector<Tensor> again = call(row.op, row.inputs, row.attrs);
  Attrs next = row.attrs;
  next.set("seed", row.attrs.get_int("seed") + 1);
  std::vector<Tensor> other = call(row.op, row.inputs, next);
  ASSERT_EQ(again.size(), outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    std::vector<double> first = values_of(outputs[k]);
    EXPECT_EQ(values_of(again[k]), first) << "the same seed gave other values";
    std::vector<double> second = values_of(other[k]);
    size_t same = 0;
    for (size_t i = 0; i < first.size(); ++i) same += first[i] == second[i];
    // A dropout mask keeps the same element with probability p^2 + (1 - p)^2
    // >= 1/2; continuous draws almost never repeat.
    EXPECT_LT(same, first.size() * 9 / 10 + 1) << "seeds differ but the values do not";
  }
}

void check_forward(const OpTestCase& row) {
  std::vector<Tensor> outputs = call(row.op, row.inputs, row.attrs);
  if (!row.expected_shapes.empty()) check_shapes(row, outputs);
  if (!row.reference) {
    ASSERT_FALSE(row.expected_shapes.empty() || !row.check_random)
        << "a row without a reference needs expected_shapes and check_random";
    row.check_random(row.inputs, outputs);
    check_seeding(row, outputs);
    return;
  }
  std::vector<Tensor> expected = row.reference(row.inputs);
  ASSERT_EQ(outputs.size(), expected.size());
  for (size_t k = 0; k < outputs.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_EQ(outputs[k].shape(), expected[k].shape());
    EXPECT_EQ(outputs[k].dtype(), expected[k].dtype());
    std::vector<double> got = values_of(outputs[k]), want = values_of(expected[k]);
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(close(got[i], want[i], row.tolerance))
          << "element " << i << ": got " << got[i] << ", expected " << want[i];
    }
  }
}

// Sum over outputs of <output, cotangent>, for inputs with input `i` replaced.
double loss_at(const OpTestCase& row, int i, const std::vector<double>& x,
               const std::vector<Tensor>& cotangents) {
  Inputs inputs = row.inputs;
  inputs[i] = tensor_of(x, row.inputs[i].shape(), row.inputs[i].dtype());
  std::vector<Tensor> outputs = call(row.op, inputs, row.attrs);
  double loss = 0;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (!cotangents[k].defined()) continue;
    std::vector<double> out = values_of(outputs[k]), c = values_of(cotangents[k]);
    for (size_t e = 0; e < out.size(); ++e) loss += out[e] * c[e];
  }
  return loss;
}

// A formula told that input `skipped` needs no gradient (GradContext::
// needs_input_grad) may leave it undefined; the others' gradients must not
// change.
void check_gradient_without_each_input(const OpTestCase& row, const OpDef& op,
                                       const std::vector<Tensor>& outputs,
                                       const std::vector<Tensor>& cotangents, const Attrs& attrs,
                                       const std::vector<Tensor>& full) {
  if (row.inputs.size() < 2) return;
  for (size_t skipped = 0; skipped < row.inputs.size(); ++skipped) {
    SCOPED_TRACE("input " + std::to_string(skipped) + " needs no gradient");
    std::unique_ptr<bool[]> needs(new bool[row.inputs.size()]);
    for (size_t i = 0; i < row.inputs.size(); ++i) needs[i] = i != skipped;
    std::vector<Tensor> grads = op.gradient({row.inputs, outputs, cotangents, attrs,
                                             absl::MakeConstSpan(needs.get(), row.inputs.size())});
    ASSERT_EQ(grads.size(), row.inputs.size());
    for (size_t i = 0; i < row.inputs.size(); ++i) {
      if (i == skipped) continue;
      ASSERT_EQ(grads[i].defined(), full[i].defined()) << "input " << i;
      if (!full[i].defined()) continue;
      EXPECT_EQ(values_of(grads[i]), values_of(full[i])) << "input " << i;
    }
  }
}

void check_gradient(const OpTestCase& row) {
  const OpDef& op = Registry::global().get(row.op);
  ASSERT_TRUE(op.differentiable);
  std::vector<Tensor> outputs = call(op, row.inputs, row.attrs, std::source_location::current());
  std::vector<Tensor> cotangents;
  for (size_t k = 0; k < outputs.size(); ++k) {
    bool floating = outputs[k].dtype() == DType::kFloat64;
    cotangents.push_back(floating ? random_tensor(outputs[k].shape(), 1000 + k) : Tensor());
  }
  Attrs attrs = resolve_attrs(op, row.attrs);
  std::vector<Tensor> grads = op.gradient({row.inputs, outputs, cotangents, attrs});
  ASSERT_EQ(grads.size(), row.inputs.size()) << "one gradient per input";
  check_gradient_without_each_input(row, op, outputs, cotangents, attrs, grads);

  std::vector<int> checked = gradient_checked_inputs(row);
  ASSERT_FALSE(checked.empty())
      << "the row checks no gradient: give it a float64 input or set check_gradient = false";
  constexpr double kEps = 1e-6;
  for (int i : checked) {
    SCOPED_TRACE("input " + std::to_string(i));
    ASSERT_EQ(row.inputs[i].dtype(), DType::kFloat64) << "finite differences need float64";
    std::vector<double> x = values_of(row.inputs[i]);
    std::vector<double> analytic(x.size(), 0.0);
    if (grads[i].defined()) {
      ASSERT_EQ(grads[i].shape(), row.inputs[i].shape()) << "gradient shape";
      analytic = values_of(grads[i]);
    }
    auto derivative_along = [&](const std::vector<double>& direction) {
      std::vector<double> plus = x, minus = x;
      for (size_t e = 0; e < x.size(); ++e) {
        plus[e] += kEps * direction[e];
        minus[e] -= kEps * direction[e];
      }
      return (loss_at(row, i, plus, cotangents) - loss_at(row, i, minus, cotangents)) / (2 * kEps);
    };
    if (x.size() <= 32) {
      for (size_t e = 0; e < x.size(); ++e) {
        std::vector<double> unit(x.size(), 0.0);
        unit[e] = 1;
        double numeric = derivative_along(unit);
        EXPECT_TRUE(close(analytic[e], numeric, row.grad_tolerance))
            << "element " << e << ": analytic " << analytic[e] << ", numeric " << numeric;
      }
    } else {
      // Large input: one random direction t; compare d/de L(x + e t) with <grad, t>.
      std::vector<double> t = values_of(random_tensor(row.inputs[i].shape(), 77));
      double numeric = derivative_along(t), projected = 0;
      for (size_t e = 0; e < x.size(); ++e) projected += analytic[e] * t[e];
      EXPECT_TRUE(close(projected, numeric, row.grad_tolerance))
          << "directional derivative: analytic " << projected << ", numeric " << numeric;
    }
  }
}

// The row's call on `device`: inputs copied there, and a creation op (one
// with a "device" attribute) told to create its output there.
std::vector<Tensor> call_on(Device device, const OpDef& op, const OpTestCase& row) {
  Inputs inputs;
  for (const Tensor& t : row.inputs) inputs.push_back(on_device(t, device));
  Attrs attrs = row.attrs;
  for (const AttrSpec& spec : op.attrs) {
    if (spec.name == "device") attrs.set("device", device.to_string());
  }
  return call(op, inputs, attrs, std::source_location::current());
}

void expect_same_values(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                        double tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_EQ(got[k].defined(), want[k].defined());
    if (!want[k].defined()) continue;
    ASSERT_EQ(got[k].shape(), want[k].shape());
    EXPECT_EQ(got[k].dtype(), want[k].dtype());
    std::vector<double> g = values_of(got[k]), w = values_of(want[k]);
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(close(g[i], w[i], tolerance))
          << "element " << i << ": " << got[k].device().to_string() << " " << g[i] << ", cpu "
          << w[i];
    }
  }
}

// Float32 rounding: the devices may sum in different orders.
constexpr double kDeviceTolerance = 1e-4;

// The row on the first CUDA device against the same row on the CPU: forward
// values (shapes only for random ops, whose rows have no reference) and,
// where the row checks one, the gradient for the same cotangents.
void check_on_cuda(const OpTestCase& row) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  if (Registry::global().get(row.op).collective) {
    GTEST_SKIP() << "collectives of GPU tensors (NCCL) are not built yet";
  }
  const Device cuda = Device::cuda(0);
  const OpDef& op = Registry::global().get(row.op);
  std::vector<Tensor> cpu_out = call_on(Device::cpu(), op, row);
  std::vector<Tensor> cuda_out = call_on(cuda, op, row);
  for (const Tensor& t : cuda_out) EXPECT_EQ(t.device(), cuda);
  double tolerance = std::max(row.tolerance, kDeviceTolerance);
  if (row.reference) {
    expect_same_values(cuda_out, cpu_out, tolerance);
  } else {
    // The same counter-based stream on both devices (Note [Counter-based
    // random numbers]): randn up to each device's log and cos.
    expect_same_values(cuda_out, cpu_out, tolerance);
    if (row.check_random) row.check_random(row.inputs, cuda_out);
  }
  if (!row.check_gradient || !op.differentiable) return;
  SCOPED_TRACE("gradient");
  std::vector<Tensor> cotangents, cuda_cotangents;
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    bool floating = cpu_out[k].dtype() == DType::kFloat64;
    cotangents.push_back(floating ? random_tensor(cpu_out[k].shape(), 1000 + k) : Tensor());
    cuda_cotangents.push_back(on_device(cotangents.back(), cuda));
  }
  Inputs cuda_inputs;
  for (const Tensor& t : row.inputs) cuda_inputs.push_back(on_device(t, cuda));
  Attrs attrs = resolve_attrs(op, row.attrs);
  expect_same_values(op.gradient({cuda_inputs, cuda_out, cuda_cotangents, attrs}),
                     op.gradient({row.inputs, cpu_out, cotangents, attrs}), tolerance);
}

enum class Check { kForward, kGradient, kOnCuda };

class RowTest : public ::testing::Test {
 public:
  RowTest(OpTestCase row, Check check) : row_(std::move(row)), check_(check) {}
  void TestBody() override {
    switch (check_) {
      case Check::kForward:
        return check_forward(row_);
      case Check::kGradient:
        return check_gradient(row_);
      case Check::kOnCuda:
        return check_on_cuda(row_);
    }
  }

 private:
  OpTestCase row_;
  Check check_;
};

// Verifies that every registered op has at least one row, and every
// differentiable op a row whose gradient check checks some float64 input (a
// row that checks none checks nothing and does not count).
TEST(OpTableTest, EveryOpHasRows) {
  std::set<std::string> with_rows, with_gradient_rows;
  for (const auto& [family, rows] : registered_row_families()) {
    for (const OpTestCase& row : rows()) {
      with_rows.insert(row.op);
      if (!gradient_checked_inputs(row).empty()) with_gradient_rows.insert(row.op);
    }
  }
  for (const OpDef* op : Registry::global().all()) {
    EXPECT_TRUE(with_rows.contains(op->name)) << "op '" << op->name << "' has no test row";
    if (op->differentiable) {
      EXPECT_TRUE(with_gradient_rows.contains(op->name))
          << "op '" << op->name << "' has no row checking its gradient";
    }
  }
}

// Verifies that a CUDA build has a CUDA kernel for every op: an op without
// one fails on a GPU at the call ("has no kernel for cuda:0"), which the
// *_cuda row tests only find on a machine with a GPU.
TEST(OpTableTest, EveryOpHasACudaKernel) {
#ifdef TANDEM_WITH_CUDA
  for (const OpDef* op : Registry::global().all()) {
    EXPECT_NE(op->cuda, nullptr) << "op '" << op->name << "' has no CUDA kernel";
  }
#else
  GTEST_SKIP() << "this build has no CUDA kernels";
#endif
}

void register_row_tests() {
  for (const auto& [family, rows] : registered_row_families()) {
    for (OpTestCase& row : rows()) {
      std::string suite = "Op_" + family;
      std::string name = row.op + "_" + row.name;
      auto add = [&](const char* what, Check check) {
        ::testing::RegisterTest(
            suite.c_str(), (name + what).c_str(), nullptr, nullptr, __FILE__, __LINE__,
            [row, check]() -> ::testing::Test* { return new RowTest(row, check); });
      };
      add("_forward", Check::kForward);
      const OpDef* op = Registry::global().find(row.op);
      if (row.check_gradient && op != nullptr && op->differentiable)
        add("_gradient", Check::kGradient);
#ifdef TANDEM_WITH_CUDA
      // Every row once more on a GPU, forward and gradient against the CPU: one
      // parametrized suite for every device, skipped (and named) on a machine
      // without one. A build without CUDA has no GPU path to name.
      add("_cuda", Check::kOnCuda);
#endif
    }
  }
}

}  // namespace
}  // namespace tandem::kernels::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tandem::kernels::testing::register_row_tests();
  return RUN_ALL_TESTS();
}
