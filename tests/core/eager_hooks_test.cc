// Linked with tandem::core alone: Tensor's methods that eager implements
// (Note [Eager hooks] in core/eager_hooks.h) say so, instead of failing to
// link or doing nothing.
#include "core/eager_hooks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"
#include "tests/error_of.h"

namespace tandem {
namespace {

using tandem::testing::error_of;
using ::testing::HasSubstr;

TEST(EagerHooksTest, WithoutEagerTheAutogradMethodsNameWhatIsMissing) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_THAT(error_of([&] { x.requires_grad_(); }),
              HasSubstr("Tensor::requires_grad_() is implemented by tandem::eager"));
  EXPECT_THAT(error_of([&] { (void)x.requires_grad(); }), HasSubstr("Tensor::requires_grad()"));
  EXPECT_THAT(error_of([&] { (void)x.grad(); }), HasSubstr("Tensor::grad()"));
  EXPECT_THAT(error_of([&] { x.zero_grad_(); }), HasSubstr("Tensor::zero_grad_()"));
  EXPECT_THAT(error_of([&] { x.backward(); }), HasSubstr("Tensor::backward()"));
  EXPECT_THAT(error_of([&] { (void)x.to(Device::cpu()); }), HasSubstr("Tensor::to()"));
}

TEST(EagerHooksTest, DetachIsCoresOwn) {
  Tensor x = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_EQ(x.detach().to_vector<float>(), (std::vector<float>{1, 2}));
}

}  // namespace
}  // namespace tandem
