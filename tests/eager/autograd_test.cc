// Autograd: recording, backward through the registry's gradients,
// accumulation, NoGradGuard, detach, and the errors users hit.
#include "eager/autograd.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Tensor leaf(std::vector<double> values, Shape shape) {
  Tensor t = Tensor::from_vector(values, std::move(shape));
  t.requires_grad_();
  return t;
}

// Verifies the gradient of a small expression against the hand derivative:
// y = sum(w * w + 3 w) gives dy/dw = 2w + 3.
TEST(AutogradTest, GradientOfAnExpression) {
  Tensor w = leaf({1, -2, 0.5}, {3});
  Tensor y = sum(add(mul(w, w), mul(w, 3.0)));
  EXPECT_TRUE(y.requires_grad());
  y.backward();
  EXPECT_THAT(w.grad().to_vector<double>(), ElementsAre(5, -1, 4));
}

// Verifies that reshape and flatten are views in eager mode (OpDef::is_view):
// they share the input's data, and gradients still flow through them.
TEST(AutogradTest, ReshapeAndFlattenAreViewsThatCarryGradients) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor r = reshape(x, {3, 2});
  Tensor f = flatten(reshape(r, {1, 6, 1}), 1);
  EXPECT_EQ(r.raw_data(), x.raw_data());
  EXPECT_EQ(f.raw_data(), x.raw_data());
  EXPECT_EQ(f.shape(), (Shape{1, 6}));
  EXPECT_TRUE(f.requires_grad());
  sum(mul(f, f)).backward();
  EXPECT_THAT(x.grad().to_vector<double>(), ElementsAre(2, 4, 6, 8, 10, 12));
}

// Verifies that a tensor used twice gets the sum of both paths, and that
// broadcasting sums the gradient back to the operand's shape.
TEST(AutogradTest, SharedInputsAndBroadcastAccumulate) {
  Tensor a = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  Tensor y = sum(mul(add(a, b), a));  // d/da = 2a + b, d/db = sum over rows of a.
  y.backward();
  EXPECT_THAT(a.grad().to_vector<double>(), ElementsAre(12, 24, 36, 18, 30, 42));
  EXPECT_THAT(b.grad().to_vector<double>(), ElementsAre(5, 7, 9));
}

// Verifies that gradients accumulate over backward calls until zero_grad_.
TEST(AutogradTest, GradientsAccumulateAcrossBackward) {
  Tensor w = leaf({2}, {1});
  sum(mul(w, 3.0)).backward();
  sum(mul(w, 3.0)).backward();
  EXPECT_THAT(w.grad().to_vector<double>(), ElementsAre(6));
  w.zero_grad_();
  EXPECT_FALSE(w.grad().defined());
}

// Verifies that nothing is recorded under NoGradGuard, nor through detach().
TEST(AutogradTest, NoGradGuardAndDetachStopRecording) {
  Tensor w = leaf({1, 2}, {2});
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(mul(w, w).requires_grad());
  }
  EXPECT_TRUE(mul(w, w).requires_grad());
  EXPECT_FALSE(mul(w.detach(), w.detach()).requires_grad());
}

// Verifies that backward twice through a freed graph is an Error naming the
// op and the line that recorded it, and that retain_graph allows it.
TEST(AutogradTest, BackwardTwiceNeedsRetainGraph) {
  Tensor w = leaf({1, 2}, {2});
  int line = __LINE__ + 1;
  Tensor y = sum(mul(w, w));
  y.backward();
  try {
    y.backward();
    FAIL() << "second backward did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("retain_graph"));
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  }
  Tensor z = sum(mul(w, w));
  w.zero_grad_();
  z.backward({}, /*retain_graph=*/true);
  z.backward();
  EXPECT_THAT(w.grad().to_vector<double>(), ElementsAre(4, 8));
}

// Verifies the errors for misuse: backward on a non-scalar without a
// gradient, on a tensor that needs no grad, and requires_grad on ints.
TEST(AutogradTest, MisuseIsAnError) {
  Tensor w = leaf({1, 2}, {2});
  EXPECT_THROW(mul(w, w).backward(), Error);
  Tensor plain = Tensor::from_vector<double>({1.0}, {1});
  EXPECT_THROW(plain.backward(), Error);
  Tensor ints = Tensor::from_vector<int64_t>({1, 2}, {2});
  EXPECT_THROW(ints.requires_grad_(), Error);
}

// Verifies backward with an explicit gradient for a non-scalar output.
TEST(AutogradTest, ExplicitOutputGradient) {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor y = mul(w, w);
  y.backward(Tensor::from_vector<double>({1, 0, 2}, {3}));
  EXPECT_THAT(w.grad().to_vector<double>(), ElementsAre(2, 0, 12));
}

// Verifies that a long chain (deeper than any recursion would survive) works.
TEST(AutogradTest, LongChain) {
  Tensor w = leaf({1}, {1});
  Tensor y = w;
  for (int i = 0; i < 20000; ++i) y = add(y, 1.0);
  sum(y).backward();
  EXPECT_THAT(w.grad().to_vector<double>(), ElementsAre(1));
}

// Verifies that a failure inside backward names the user's line of the
// forward call, not a line of Tandem's gradient helpers: here the kernel of
// cross_entropy's backward op finds the bad target when it runs. The forward
// op fails on its own too (it reads the same target), and that failure is
// reported by the first wait on the loss, once.
TEST(AutogradTest, BackwardFailureNamesTheForwardCallersLine) {
  Tensor logits = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor target = Tensor::from_vector<int64_t>({0, 7}, {2});
  const int line = __LINE__ + 1;
  Tensor loss = cross_entropy(logits, target);
  loss.backward();
  try {
    logits.grad().to_vector<double>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy_backward: target 7 of sample 1"));
    EXPECT_THAT(e.what(), HasSubstr(str_cat("autograd_test.cc:", line)));
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  }
  try {
    loss.item<double>();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy: target 7 of sample 1"));
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  }
}

}  // namespace
}  // namespace tandem
