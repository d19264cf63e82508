// Rows for fused_elementwise.cc: each instruction alone against plain math,
// programs mixing them (scalars, diamonds, blocks and cores), and the errors
// that bad programs give.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <numbers>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

Attrs program(std::string text) { return {{"program", std::move(text)}}; }

// The op is not differentiable (it exists only after tracing): forward only.
OpTestCase fused_row(std::string name, std::string text, Inputs inputs,
                     std::function<std::vector<Tensor>(const Inputs&)> reference) {
  return {.name = std::move(name),
          .op = "fused_elementwise",
          .inputs = std::move(inputs),
          .attrs = program(std::move(text)),
          .reference = std::move(reference),
          .check_gradient = false};
}

// Appends a row and its float32 copy.
void add_both_dtypes(std::vector<OpTestCase>& rows, OpTestCase row) {
  OpTestCase f32 = row;
  f32.name += "_f32";
  for (Tensor& t : f32.inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
  auto reference = row.reference;
  f32.reference = [reference](const Inputs& in) {
    std::vector<Tensor> out = reference(in);
    for (Tensor& t : out) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    return out;
  };
  f32.tolerance = 1e-5;
  rows.push_back(std::move(row));
  rows.push_back(std::move(f32));
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double gelu(double x) { return x * 0.5 * (1 + std::erf(x / std::numbers::sqrt2)); }
double sign(double x) { return x > 0 ? 1 : (x < 0 ? -1 : 0); }

TANDEM_OP_TEST_ROWS(fused_elementwise) {
  std::vector<OpTestCase> rows;
  Tensor x = tensor_of({-1.7, -0.8, -0.3, 0.2, 0.6, 1.4}, {2, 3});
  Tensor positive = random_tensor({2, 3}, 1, 0.5, 2);
  Tensor y = random_tensor({2, 3}, 2, 0.5, 2);

  struct Unary {
    const char* instr;
    std::function<double(double)> f;
    Tensor x;
  };
  std::vector<Unary> unary = {
      {"neg(i0)", [](double v) { return -v; }, x},
      {"abs(i0)", [](double v) { return std::abs(v); }, x},
      {"sign(i0)", sign, x},
      {"square(i0)", [](double v) { return v * v; }, x},
      {"relu(i0)", [](double v) { return std::max(v, 0.0); }, x},
      {"exp(i0)", [](double v) { return std::exp(v); }, x},
      {"log(i0)", [](double v) { return std::log(v); }, positive},
      {"sqrt(i0)", [](double v) { return std::sqrt(v); }, positive},
      {"rsqrt(i0)", [](double v) { return 1 / std::sqrt(v); }, positive},
      {"tanh(i0)", [](double v) { return std::tanh(v); }, x},
      {"sigmoid(i0)", sigmoid, x},
      {"erf(i0)", [](double v) { return std::erf(v); }, x},
      {"gelu(i0)", gelu, x},
      {"leaky_relu(i0,alpha=0.25)", [](double v) { return v >= 0 ? v : 0.25 * v; }, x},
      {"clip(i0,max=0.5,min=-1)", [](double v) { return std::clamp(v, -1.0, 0.5); }, x},
  };
  for (const Unary& u : unary) {
    std::string name(u.instr, std::string_view(u.instr).find('('));
    auto f = u.f;
    add_both_dtypes(rows, fused_row(name, str_cat("r0=", u.instr), {u.x},
                                    [f](const Inputs& in) { return std::vector{map1(in[0], f)}; }));
  }
  struct Binary {
    const char* name;
    std::function<double(double, double)> f;
  };
  std::vector<Binary> binary = {
      {"add", std::plus<>()},
      {"sub", std::minus<>()},
      {"mul", std::multiplies<>()},
      {"div", std::divides<>()},
      {"pow", [](double a, double b) { return std::pow(a, b); }},
      {"maximum", [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](double a, double b) { return std::min(a, b); }},
  };
  for (const Binary& b : binary) {
    auto f = b.f;
    add_both_dtypes(
        rows, fused_row(b.name, str_cat("r0=", b.name, "(i0,i1)"), {positive, y},
                        [f](const Inputs& in) { return std::vector{map2(in[0], in[1], f)}; }));
  }

  // exp(x) * s + x with s a scalar, then relu: inputs read twice, a scalar.
  auto chain = [](const Inputs& in) {
    Tensor t =
        map2(map2(map1(in[0], [](double v) { return std::exp(v); }), in[1], std::multiplies<>()),
             in[0], std::plus<>());
    return std::vector{map1(t, [](double v) { return std::max(v, 0.0); })};
  };
  const char* chain_program = "r0=exp(i0);r1=mul(r0,i1);r2=add(r1,i0);r3=relu(r2)";
  add_both_dtypes(rows,
                  fused_row("chain_with_scalar", chain_program, {x, tensor_of({-0.5}, {})}, chain));
  // A diamond: tanh(x) and sigmoid(x) both from x, then their product.
  add_both_dtypes(
      rows,
      fused_row("diamond", "r0=tanh(i0);r1=sigmoid(i0);r2=mul(r0,r1)", {x}, [](const Inputs& in) {
        return std::vector{map1(in[0], [](double v) { return std::tanh(v) * sigmoid(v); })};
      }));
  // Many blocks, a ragged last one, and (at this size) every core.
  Tensor big = random_tensor({301, 337}, 3, -2, 2);
  add_both_dtypes(rows,
                  fused_row("many_blocks", chain_program, {big, tensor_of({1.5}, {1, 1})}, chain));
  // Only scalars: the output is a scalar of the broadcast shape.
  add_both_dtypes(rows, fused_row("scalars", "r0=sub(i0,i1);r1=square(r0)",
                                  {tensor_of({3}, {}), tensor_of({1}, {1})},
                                  [](const Inputs&) { return std::vector{result({4}, {1})}; }));
  return rows;
}

Tensor f32(Shape shape) { return random_tensor(std::move(shape), 7, -1, 1, DType::kFloat32); }

std::string error_for(const std::string& text, std::vector<Tensor> inputs = {f32({4})}) {
  return error_of([&] { call("fused_elementwise", inputs, program(text)); });
}

// Verifies that a bad program is an error naming the instruction and problem.
// A value for each parameter of `op` other than its default (finite ones
// only: clip's bounds default to infinities).
double test_value(const ElementwiseInfo& op, int k) {
  double d = op.params[static_cast<size_t>(k)].default_value;
  return std::isfinite(d) ? d * 0.5 + 0.1 : (k == 0 ? -1.0 : 1.0);
}

// Verifies that every op a program may use computes, as an instruction,
// exactly what the op computes alone, bit for bit (NaN where it gives NaN).
// Generated from the op list (kernels/elementwise_ops.h), so a new op is
// covered without a new row.
TEST(FusedElementwiseTest, EveryInstructionIsItsOpBitForBit) {
  const std::vector<double> xs = {-4, -2.5, -1.2, -0.5, -0.1, 0, 0.3, 0.5, 0.9, 1.5, 2.5, 25, NAN};
  const std::vector<double> ys = {1.5, -0.7, 2, 0.4, 3, -1.1, 0.5, 0.25, -2, 1, 0.5, 2, 1};
  const Shape shape({static_cast<int64_t>(xs.size())});
  int checked = 0;
  for (const ElementwiseInfo& op : elementwise::ElementwiseOps::infos()) {
    if (!op.fusable) continue;
    for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
      std::vector<Tensor> inputs = {tensor_of(xs, shape, dtype)};
      if (op.arity == 2) inputs.push_back(tensor_of(ys, shape, dtype));
      std::string text = str_cat("r0=", op.name, "(i0", op.arity == 2 ? ",i1" : "");
      Attrs attrs;
      for (int k = 0; k < op.num_params; ++k) {
        const std::string name(op.params[static_cast<size_t>(k)].name);
        char number[64];
        *std::to_chars(number, number + sizeof(number), test_value(op, k)).ptr = '\0';
        text += str_cat(",", name, "=", number);
        attrs.set(name, test_value(op, k));
      }
      text += ")";
      SCOPED_TRACE(str_cat(text, " ", dtype_name(dtype)));
      std::vector<double> fused = values_of(call1("fused_elementwise", inputs, program(text)));
      std::vector<double> alone = values_of(call1(op.name, inputs, attrs));
      ASSERT_EQ(fused.size(), alone.size());
      for (size_t i = 0; i < fused.size(); ++i) {
        if (std::isnan(alone[i])) {
          EXPECT_TRUE(std::isnan(fused[i])) << "at x = " << xs[i];
        } else {
          EXPECT_EQ(fused[i], alone[i]) << "at x = " << xs[i];
        }
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(FusedElementwiseTest, BadProgramsNameTheProblem) {
  EXPECT_THAT(error_for(""), HasSubstr("the program is empty"));
  EXPECT_THAT(error_for("r0=frobnicate(i0)"),
              HasSubstr("unknown op 'frobnicate'; expected one of: neg"));
  EXPECT_THAT(error_for("r0=exp(i0);r2=neg(r0)"),
              HasSubstr("instruction 1 'r2=neg(r0)': defines 'r2', expected r1"));
  EXPECT_THAT(error_for("r0=exp(i1)"), HasSubstr("operand 'i1' is not an input (the node has 1)"));
  EXPECT_THAT(error_for("r0=exp(r0)"), HasSubstr("operand 'r0' is not an input iN or an earlier"));
  EXPECT_THAT(error_for("r0=add(i0)"), HasSubstr("add takes 2 operand(s) and 0 parameter(s)"));
  EXPECT_THAT(error_for("r0=exp(i0"), HasSubstr("expected r0=op(operands, param=value)"));
  EXPECT_THAT(error_for("r0=clip(i0,min=1,max=x)"), HasSubstr("parameter 'max' is not a number"));
  EXPECT_THAT(error_for("r0=clip(i0,min=1,min=2)"), HasSubstr("parameter 'min' given twice"));
  EXPECT_THAT(error_for("r0=leaky_relu(i0,beta=1)"), HasSubstr("has no parameter 'beta'"));
  EXPECT_THAT(error_for("r0=clip(i0,min=2,max=1)"), HasSubstr("min must not exceed max"));
  EXPECT_THAT(error_for("r0=exp(i0)", {f32({4}), f32({4})}),
              HasSubstr("the program never reads input i1"));
}

// Verifies that inputs of another shape, dtype or kind are refused.
TEST(FusedElementwiseTest, RefusesInputsItCannotFuse) {
  std::string what = error_for("r0=add(i0,i1)", {f32({2, 3}), f32({3})});
  EXPECT_THAT(what, HasSubstr("fused_elementwise"));
  EXPECT_THAT(what, HasSubstr("input 1 has shape [3]; expected the output's shape [2, 3]"));
  EXPECT_THAT(error_for("r0=add(i0,i1)", {f32({3}), random_tensor({3}, 1)}),
              HasSubstr("input 1 is float64, input 0 is float32"));
  EXPECT_THAT(error_for("r0=neg(i0)", {tensor_of({1, 2}, {2}, DType::kInt32)}),
              HasSubstr("inputs must be float32 or float64, got int32"));
}

}  // namespace
}  // namespace tandem::kernels::testing
