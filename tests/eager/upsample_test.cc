// nn::Upsample and interpolate: nearest upsampling by whole factors repeats
// each element (checked against a loop); bilinear is separable, so resizing
// one axis at a time gives the same answer; gradients against central
// differences; and an export with a free length follows it.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "serialization/model.h"
#include "tests/eager/float64_values.h"
#include "tests/error_of.h"
#include "tests/serialization/test_util.h"

namespace tandem {
namespace {

using testing::check_gradient;
using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::Values;
using testing::values_of;

// Verifies that nearest upsampling by 2 and 3 repeats each element into a
// 2x3 block.
TEST(Upsample, NearestByWholeFactorsRepeatsEachElement) {
  manual_seed(1);
  Tensor x = randn({2, 3, 4, 5}, DType::kFloat64);
  nn::Upsample up({.scale_factor = {2, 3}});
  Tensor y = up(x);
  ASSERT_EQ(y.shape(), Shape({2, 3, 8, 15}));
  Values in = values_of(x), out = values_of(y), expected;
  for (int64_t p = 0; p < 6; ++p) {
    for (int64_t h = 0; h < 8; ++h) {
      for (int64_t w = 0; w < 15; ++w) expected.push_back(in[(p * 4 + h / 2) * 5 + w / 3]);
    }
  }
  expect_near(out, expected, 0);
}

// Verifies that bilinear resizing equals linear resizing of one axis, then
// the other, both ways of align_corners, and that gradients match central
// differences.
TEST(Upsample, BilinearIsSeparableAndDifferentiable) {
  manual_seed(2);
  Tensor x = randn({1, 2, 3, 4}, DType::kFloat64);
  for (bool align_corners : {false, true}) {
    SCOPED_TRACE(align_corners ? "align_corners" : "half pixel");
    Tensor both = interpolate(x, {5, 7}, "bilinear", align_corners);
    // [1, 2, 3, 4] -> rows as [1, 2*3, 4] resized to 7 -> back and resize the 3 axis.
    Tensor wide =
        reshape(interpolate(reshape(x, {1, 6, 4}), {7}, "linear", align_corners), {1, 2, 3, 7});
    Tensor tall = transpose(reshape(interpolate(reshape(transpose(wide, {0, 1, 3, 2}), {1, 14, 3}),
                                                {5}, "linear", align_corners),
                                    {1, 2, 7, 5}),
                            {0, 1, 3, 2});
    expect_near(values_of(both), values_of(tall), 1e-12);
    nn::Upsample up({.size = {5, 7}, .mode = "bilinear", .align_corners = align_corners});
    check_gradient([&](const Tensor& t) { return up(t); }, x);
  }
  check_gradient(
      [](const Tensor& t) {
        return interpolate(t, {2, 3, 5}, "trilinear");
      },
      randn({1, 1, 3, 2, 4}, DType::kFloat64));
  check_gradient([](const Tensor& t) { return interpolate(t, {7}); },
                 randn({2, 2, 3}, DType::kFloat64));
}

TEST(Upsample, BadOptionsAreErrors) {
  EXPECT_THAT(error_of([] { nn::Upsample({}); }),
              HasSubstr("Upsample needs exactly one of size and scale_factor"));
  EXPECT_THAT(error_of([] { nn::Upsample({.scale_factor = {-2}}); }),
              HasSubstr("scale_factor must be positive, got -2"));
  nn::Upsample up({.scale_factor = {2, 2}});
  EXPECT_THAT(error_of([&] {
                up(randn({1, 2, 3, 4, 5}));
              }),
              HasSubstr("Upsample of [1, 2, 3, 4, 5] needs"));
  EXPECT_THAT(error_of([] {
                interpolate(randn({1, 1, 4}), {8}, "bilinear");
              }),
              HasSubstr("mode 'bilinear' needs 2 spatial sizes, got 1"));
}

// Verifies that a 1-D upsampling over a free length exports once and gives
// the eager answers at other lengths (the output size is 2 * len).
TEST(Upsample, ExportsWithAFreeLength) {
  const testing::ScratchDir dir;
  manual_seed(3);
  nn::Sequential net(nn::Conv1d(2, 3, 3, 1, 1),
                     nn::Upsample({.scale_factor = {2}, .mode = "linear"}), nn::ReLU());
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 2, 6}));
  net.export_model(dir.file("net"), {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "len"}}}}});
  LoadedModel loaded = load(dir.file("net"));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 3, 2*len]");
  for (int64_t length : {1, 6, 11}) {
    Tensor x = randn({3, 2, length});
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-5);
  }
}

}  // namespace
}  // namespace tandem
