// The CPU's own float32 formulas for erf, gelu and exp (Note [Vectorized
// formulas] in kernels/cpu/vector_formulas.h), through the ops: within
// their stated error of the double-precision functions over the whole
// float range, libm's overflow, underflow and special values, and the same
// results from a fused program as from the op.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

// float32 values from -limit to limit in `count` steps, then the specials.
std::vector<float> sweep(float limit, int count) {
  std::vector<float> xs;
  for (int i = 0; i <= count; ++i) xs.push_back(-limit + 2 * limit * static_cast<float>(i) / count);
  for (float special : {0.0f, -0.0f, FLT_MIN, -FLT_MIN, 1e-30f, -1e-30f}) xs.push_back(special);
  return xs;
}

std::vector<float> run(const std::string& op, const std::vector<float>& xs) {
  const Tensor x = Tensor::from_vector<float>(xs, {static_cast<int64_t>(xs.size())});
  return call1(op, {x}).to_vector<float>();
}

TEST(VectorFormulas, ErfAndGeluAreWithinTheirBound) {
  const std::vector<float> xs = sweep(8.0f, 1 << 20);
  const std::vector<float> erf = run("erf", xs), gelu = run("gelu", xs);
  double worst_erf = 0, worst_gelu = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double x = xs[i], want = std::erf(x);
    worst_erf = std::max(worst_erf, std::abs(erf[i] - want));
    const double want_gelu = x * 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
    worst_gelu = std::max(worst_gelu, std::abs(gelu[i] - want_gelu) / std::max(1.0, std::abs(x)));
    if (x == 0) {
      EXPECT_EQ(std::signbit(erf[i]), std::signbit(xs[i])) << x;
    }
  }
  EXPECT_LE(worst_erf, 4e-7);
  EXPECT_LE(worst_gelu, 4e-7);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special =
      run("erf", {inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(special[0], 1.0f);
  EXPECT_EQ(special[1], -1.0f);
  EXPECT_TRUE(std::isnan(special[2]));
}

TEST(VectorFormulas, ExpIsWithinFourUlpAndOverflowsAndUnderflowsAsLibm) {
  const std::vector<float> xs = sweep(110.0f, 1 << 20);
  const std::vector<float> got = run("exp", xs);
  double worst_ulps = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = std::exp(static_cast<double>(xs[i]));
    if (want > FLT_MAX) {
      EXPECT_EQ(got[i], std::numeric_limits<float>::infinity()) << xs[i];
    } else if (want >= FLT_MIN) {
      // In units of the float spacing at the true value.
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      worst_ulps = std::max(worst_ulps, std::abs(got[i] - want) / ulp);
    } else {
      // Denormals and below: within two of the smallest denormal.
      EXPECT_LE(std::abs(got[i] - want), 2 * std::numeric_limits<float>::denorm_min()) << xs[i];
    }
  }
  EXPECT_LE(worst_ulps, 4.0);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> special =
      run("exp", {inf, -inf, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(special[0], inf);
  EXPECT_EQ(special[1], 0.0f);
  EXPECT_TRUE(std::isnan(special[2]));
}

// A fused program's instructions take the ops' formulas: the same floats.
TEST(VectorFormulas, FusedProgramsGiveTheOpsResults) {
  const std::vector<float> xs = sweep(10.0f, 10000);
  const Tensor x = Tensor::from_vector<float>(xs, {static_cast<int64_t>(xs.size())});
  for (const std::string op : {"erf", "gelu", "exp"}) {
    const Attrs program = {{"program", "r0=" + op + "(i0)"}};
    EXPECT_EQ(call1("fused_elementwise", {x}, program).to_vector<float>(), run(op, xs)) << op;
  }
}

}  // namespace
}  // namespace tandem::kernels::testing
