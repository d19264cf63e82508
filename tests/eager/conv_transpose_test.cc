// nn::ConvTranspose2d and nn::ConvTranspose1d: torch's parameter layout,
// the adjoint of the convolution (<conv_transpose(y), x> = <y, conv(x)> for
// the same weight), gradients against central differences, and an export
// whose spatial sizes are free (the output size is a polynomial of the
// input's at any stride).
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/composite_ops.h"
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
using testing::values_of;

double dot(const Tensor& a, const Tensor& b) { return values_of(sum(mul(a, b)))[0]; }

// Verifies the output shape and that the transposed convolution is the
// adjoint of the convolution with the same weight, over strides, padding,
// output padding, dilation and groups.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  manual_seed(1);
  struct Case {
    nn::ConvTranspose2dOptions o;
    Shape x;
  };
  const std::vector<Case> cases = {
      {{.in_channels = 2, .out_channels = 3, .kernel_size = 3}, {2, 2, 4, 5}},
      {{.in_channels = 4,
        .out_channels = 2,
        .kernel_size = {3, 2},
        .stride = {2, 3},
        .padding = {1, 0},
        .output_padding = {1, 2},
        .dtype = DType::kFloat64},
       {1, 4, 3, 3}},
      {{.in_channels = 4,
        .out_channels = 6,
        .kernel_size = 2,
        .padding = 1,
        .groups = 2,
        .dilation = 2,
        .dtype = DType::kFloat64},
       {2, 4, 4, 3}},
  };
  for (const Case& c : cases) {
    const nn::ConvTranspose2dOptions& o = c.o;
    nn::ConvTranspose2d up({.in_channels = o.in_channels,
                            .out_channels = o.out_channels,
                            .kernel_size = o.kernel_size,
                            .stride = o.stride,
                            .padding = o.padding,
                            .output_padding = o.output_padding,
                            .groups = o.groups,
                            .bias = false,
                            .dilation = o.dilation,
                            .dtype = DType::kFloat64});
    EXPECT_EQ(up.weight().shape(),
              Shape({o.in_channels, o.out_channels / o.groups, o.kernel_size.h, o.kernel_size.w}));
    Tensor y = randn(c.x.dims().empty() ? Dims{} : Dims(c.x.begin(), c.x.end()), DType::kFloat64);
    Tensor out = up(y);
    const int64_t h = (c.x[2] - 1) * o.stride.h - 2 * o.padding.h +
                      o.dilation.h * (o.kernel_size.h - 1) + o.output_padding.h + 1;
    const int64_t w = (c.x[3] - 1) * o.stride.w - 2 * o.padding.w +
                      o.dilation.w * (o.kernel_size.w - 1) + o.output_padding.w + 1;
    ASSERT_EQ(out.shape(), Shape({c.x[0], o.out_channels, h, w}));
    Tensor x = randn({c.x[0], o.out_channels, h, w}, DType::kFloat64);
    Tensor forward = conv2d(x, up.weight(), zeros({o.in_channels}, DType::kFloat64),
                            o.stride.dims(), o.padding.dims(), o.dilation.dims(), o.groups);
    EXPECT_NEAR(dot(out, x), dot(y, forward), 1e-9);
    check_gradient([&](const Tensor& t) { return up(t); }, y);
  }
  nn::ConvTranspose2d biased(
      {.in_channels = 2, .out_channels = 3, .kernel_size = 2, .dtype = DType::kFloat64});
  Tensor y = randn({1, 2, 3, 3}, DType::kFloat64);
  check_gradient([&](const Tensor& t) { return mul(biased(t), biased(t)); }, y);
  // The bias and weight gradients, through autograd, against differences.
  Tensor loss = sum(square(biased(y)));
  loss.backward();
  EXPECT_EQ(biased.bias().grad().shape(), Shape({3}));
  EXPECT_EQ(biased.weight().grad().shape(), Shape({2, 3, 2, 2}));
}

TEST(ConvTranspose2d, BadOptionsAndInputsAreErrors) {
  EXPECT_THAT(error_of([] { nn::ConvTranspose2d(3, 4, 2, 1, 0, 0, 2); }),
              HasSubstr("must be multiples of groups"));
  nn::ConvTranspose2d up(3, 4, 2, 2);
  EXPECT_THAT(error_of([&] {
                up(randn({1, 2, 4, 4}));
              }),
              HasSubstr("expects input of shape [N, 3, H, W], got [1, 2, 4, 4]"));
  nn::ConvTranspose2d bad(3, 4, 2, 1, 0, /*output_padding=*/1);
  EXPECT_THAT(error_of([&] {
                bad(randn({1, 3, 4, 4}));
              }),
              HasSubstr("output_padding [1, 1] must be below the stride"));
}

// Verifies that a decoder of transposed convolutions exports with batch,
// height and width free and gives the eager answers at other sizes.
TEST(ConvTranspose2d, ExportsWithFreeSpatialSizes) {
  const testing::ScratchDir dir;
  manual_seed(2);
  nn::Sequential net(nn::ConvTranspose2d(3, 4, 3, 2, 1, 1), nn::ReLU(),
                     nn::ConvTranspose2d(4, 2, 2, 1));
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 3, 5, 6}));
  net.export_model(dir.file("decoder"),
                   {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "h"}, {3, "w"}}}}});
  LoadedModel loaded = load(dir.file("decoder"));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 2, 2*h + 1, 2*w + 1]");
  for (auto [h, w] : {std::pair<int64_t, int64_t>{1, 1}, {5, 6}, {7, 3}}) {
    Tensor x = randn({3, 3, h, w});
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-5);
  }
}

// The same for the 1-d module, against conv1d, and its export with the
// length free.
TEST(ConvTranspose1d, IsTheAdjointOfConv1dAndExportsWithAFreeLength) {
  manual_seed(3);
  const std::vector<nn::ConvTranspose1dOptions> cases = {
      {.in_channels = 2, .out_channels = 3, .kernel_size = 3},
      {.in_channels = 4,
       .out_channels = 2,
       .kernel_size = 2,
       .stride = 3,
       .padding = 1,
       .output_padding = 2},
      {.in_channels = 4,
       .out_channels = 6,
       .kernel_size = 3,
       .padding = 2,
       .groups = 2,
       .dilation = 2},
  };
  for (nn::ConvTranspose1dOptions o : cases) {
    o.bias = false;
    o.dtype = DType::kFloat64;
    nn::ConvTranspose1d up(o);
    EXPECT_EQ(up.weight().shape(),
              Shape({o.in_channels, o.out_channels / o.groups, o.kernel_size}));
    Tensor y = randn({2, o.in_channels, 4}, DType::kFloat64);
    Tensor out = up(y);
    const int64_t length =
        3 * o.stride - 2 * o.padding + o.dilation * (o.kernel_size - 1) + o.output_padding + 1;
    ASSERT_EQ(out.shape(), Shape({2, o.out_channels, length}));
    Tensor x = randn({2, o.out_channels, length}, DType::kFloat64);
    Tensor forward = conv1d(x, up.weight(), zeros({o.in_channels}, DType::kFloat64), o.stride,
                            o.padding, o.dilation, o.groups);
    EXPECT_NEAR(dot(out, x), dot(y, forward), 1e-9);
    check_gradient([&](const Tensor& t) { return up(t); }, y);
  }
  EXPECT_EQ(nn::ConvTranspose1d(3, 4, 2, 2, 0, 1).extra_repr(),
            "3, 4, kernel_size=2, stride=2, output_padding=1");
  EXPECT_THAT(error_of([] {
                nn::ConvTranspose1d(3, 4, 2)(randn({1, 3, 4, 4}));
              }),
              HasSubstr("ConvTranspose1d(3 -> 4) expects input of shape [N, 3, L], got "
                        "[1, 3, 4, 4]"));
  EXPECT_THAT(
      error_of([] {
        conv_transpose1d(randn({1, 3, 4}), randn({3, 4, 2, 2}), zeros({4}));
      }),
      HasSubstr("conv_transpose1d: weight must be [in, out / groups, k], got [3, 4, 2, 2]"));

  const testing::ScratchDir dir;
  nn::Sequential net(nn::Conv1d(3, 4, 3, 1, 1), nn::ReLU(), nn::ConvTranspose1d(4, 2, 3, 2, 1, 1));
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 3, 8}));
  net.export_model(dir.file("autoencoder"),
                   {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "len"}}}}});
  LoadedModel loaded = load(dir.file("autoencoder"));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 2, 2*len]");
  for (int64_t len : {1, 8, 13}) {
    Tensor x = randn({3, 3, len});
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-5);
  }
}

}  // namespace
}  // namespace tandem
