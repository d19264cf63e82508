// Where the ops of a gradient formula report their errors (Note [Call sites]
// in core/error.h; enclosing_call_site in kernels/ops/op_helpers.h).
#include <source_location>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/registry.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs mul's gradient with a gradient that does not broadcast against the
// operands, which an op of the formula refuses; returns its error.
Error bad_mul_gradient() {
  const OpDef& mul = Registry::global().get("mul");
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 3}, 2);
  std::vector<Tensor> outputs = call("mul", {a, b});
  try {
    mul.gradient({{a, b}, outputs, {random_tensor({4}, 3)}, Attrs()});
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error("");
}

// Verifies that inside a call-site scope (backward() opens one for each
// node, with the forward op's line), an op a gradient formula calls reports
// that line: it named ops/op_helpers.h:18, the helper's own line.
TEST(GradientCallSiteTest, OpsOfAGradientNameTheEnclosingCallSite) {
  const std::source_location forward = std::source_location::current();
  CallSiteScope site("mul", forward);
  Error e = bad_mul_gradient();
  EXPECT_EQ(e.where().line(), forward.line());
  EXPECT_THAT(e.what(), HasSubstr("gradient_call_site_test.cc"));
  EXPECT_THAT(e.what(), HasSubstr("cannot broadcast"));
  EXPECT_THAT(e.what(), Not(HasSubstr("op_helpers.h")));
}

// Verifies that with no scope open the error names the gradient formula's
// own line in its family file, the best that is known.
TEST(GradientCallSiteTest, WithoutAScopeTheFormulaIsNamed) {
  Error e = bad_mul_gradient();
  EXPECT_THAT(e.what(), HasSubstr("elementwise_binary.cc:"));
  EXPECT_THAT(e.what(), Not(HasSubstr("op_helpers.h")));
}

}  // namespace
}  // namespace tandem::kernels::testing
