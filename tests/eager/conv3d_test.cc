// nn::Conv3d and conv3d: against a float64 loop over every option (and in
// float32, oneDNN's path), gradients against central differences, torch's
// parameter shapes, errors, and export with the batch and depth free.
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
using testing::Values;
using testing::values_of;

// y[n, o, z, y, x] = b[o] + sum over c in o's group and (kz, ky, kx) of
// w[o, c, kz, ky, kx] * x[n, group c, z s - p + kz d, ...] per axis.
Values conv3d_reference(const Tensor& input, const Tensor& weight, const Values& b,
                        const nn::Conv3dOptions& o) {
  const Values x = values_of(input), w = values_of(weight);
  const Shape &xs = input.shape(), &ws = weight.shape();
  const Dims stride = o.stride.dims(), padding = o.padding.dims(), dilation = o.dilation.dims();
  int64_t out[3];
  for (int a = 0; a < 3; ++a) {
    out[a] = (xs[2 + a] + 2 * padding[a] - dilation[a] * (ws[2 + a] - 1) - 1) / stride[a] + 1;
  }
  const int64_t in_per_group = xs[1] / o.groups, out_per_group = o.out_channels / o.groups;
  Values y;
  for (int64_t n = 0; n < xs[0]; ++n) {
    for (int64_t oc = 0; oc < o.out_channels; ++oc) {
      for (int64_t z = 0; z < out[0]; ++z) {
        for (int64_t r = 0; r < out[1]; ++r) {
          for (int64_t q = 0; q < out[2]; ++q) {
            double total = b.empty() ? 0 : b[static_cast<size_t>(oc)];
            for (int64_t c = 0; c < in_per_group; ++c) {
              const int64_t channel = oc / out_per_group * in_per_group + c;
              for (int64_t kz = 0; kz < ws[2]; ++kz) {
                for (int64_t ky = 0; ky < ws[3]; ++ky) {
                  for (int64_t kx = 0; kx < ws[4]; ++kx) {
                    const int64_t iz = z * stride[0] - padding[0] + kz * dilation[0];
                    const int64_t iy = r * stride[1] - padding[1] + ky * dilation[1];
                    const int64_t ix = q * stride[2] - padding[2] + kx * dilation[2];
                    if (iz < 0 || iz >= xs[2] || iy < 0 || iy >= xs[3] || ix < 0 || ix >= xs[4]) {
                      continue;
                    }
                    total +=
                        w[static_cast<size_t>(
                            (((oc * in_per_group + c) * ws[2] + kz) * ws[3] + ky) * ws[4] + kx)] *
                        x[static_cast<size_t>(
                            (((n * xs[1] + channel) * xs[2] + iz) * xs[3] + iy) * xs[4] + ix)];
                  }
                }
              }
            }
            y.push_back(total);
          }
        }
      }
    }
  }
  return y;
}

TEST(Conv3d, MatchesAFloat64LoopForEveryOption) {
  manual_seed(5);
  const std::vector<nn::Conv3dOptions> cases = {
      {.in_channels = 2, .out_channels = 3, .kernel_size = 2},
      {.in_channels = 2,
       .out_channels = 4,
       .kernel_size = {3, 2, 1},
       .stride = {2, 1, 2},
       .padding = {1, 0, 1}},
      {.in_channels = 4,
       .out_channels = 2,
       .kernel_size = 2,
       .padding = {2, 1, 0},
       .dilation = {2, 1, 2},
       .groups = 2},
      {.in_channels = 3, .out_channels = 3, .kernel_size = {1, 2, 2}, .groups = 3, .bias = false},
  };
  for (nn::Conv3dOptions o : cases) {
    o.dtype = DType::kFloat64;
    nn::Conv3d conv(o);
    SCOPED_TRACE(conv.to_string());
    EXPECT_EQ(conv.weight().shape(), Shape({o.out_channels, o.in_channels / o.groups,
                                            o.kernel_size.d, o.kernel_size.h, o.kernel_size.w}));
    Tensor x = randn({2, o.in_channels, 5, 4, 5}, DType::kFloat64);
    const Values bias = o.bias ? values_of(conv.bias()) : Values{};
    const Values want = conv3d_reference(x, conv.weight(), bias, o);
    expect_near(values_of(conv(x)), want, 1e-12);
    // Central differences over a smaller input (two passes per element).
    check_gradient([&](const Tensor& t) { return conv(t); },
                   randn({1, o.in_channels, 4, 3, 3}, DType::kFloat64));
    // float32 takes oneDNN's convolution.
    Tensor w32 = cast(conv.weight(), DType::kFloat32);
    Tensor b32 = o.bias ? cast(conv.bias(), DType::kFloat32) : zeros({o.out_channels});
    expect_near(values_of(conv3d(cast(x, DType::kFloat32), w32, b32, o.stride.dims(),
                                 o.padding.dims(), o.dilation.dims(), o.groups)),
                want, 1e-4);
  }
  // The weight's and bias's gradients, through autograd, against differences.
  nn::Conv3d small({.in_channels = 2,
                    .out_channels = 2,
                    .kernel_size = 2,
                    .padding = 1,
                    .dtype = DType::kFloat64});
  Tensor x = randn({1, 2, 3, 3, 2}, DType::kFloat64);
  const Tensor weight = small.weight().detach(), bias = small.bias().detach();
  check_gradient([&](const Tensor& w) { return conv3d(x, w, bias, {1, 1, 1}, {1, 1, 1}); }, weight);
  check_gradient([&](const Tensor& b) { return conv3d(x, weight, b, {1, 1, 1}, {1, 1, 1}); }, bias);
  EXPECT_EQ(nn::Conv3d(2, 4, {1, 3, 3}, 1, {0, 1, 1}).to_string(),
            "Conv3d(2, 4, kernel_size=(1, 3, 3), padding=(0, 1, 1))");
}

TEST(Conv3d, BadOptionsAndInputsAreErrors) {
  EXPECT_THAT(error_of([] {
                nn::Conv3d(3, 4, {0, 2, 2});
              }),
              HasSubstr("Conv3d needs positive kernel_size"));
  EXPECT_THAT(error_of([] { nn::Conv3d(3, 4, 2, 1, 0, 1, 2); }),
              HasSubstr("Conv3d: in_channels (3) and out_channels (4) must be multiples"));
  nn::Conv3d conv(3, 4, 2);
  EXPECT_THAT(error_of([&] {
                conv(randn({2, 3, 4, 4}));
              }),
              HasSubstr("Conv3d(3 -> 4) expects input of shape [N, 3, D, H, W], got [2, 3, 4, 4]"));
  EXPECT_THAT(error_of([&] {
                conv(randn({1, 3, 1, 4, 4}));
              }),
              HasSubstr("conv3d: the dilated kernel depth (2) is larger than the padded input "
                        "depth (1 + 2 * 0)"));
  EXPECT_THAT(error_of([] {
                conv3d(randn({1, 4, 3, 3, 3}), randn({2, 3, 1, 1, 1}), zeros({2}), {1, 1, 1},
                       {0, 0, 0}, {1, 1, 1}, 2);
              }),
              HasSubstr("conv3d: weight of shape [2, 3, 1, 1, 1] and groups = 2 do not fit x of "
                        "shape [1, 4, 3, 3, 3]"));
}

// Verifies that a stack of 3-d convolutions exports with batch, depth,
// height and width free (stride 1 along depth) and gives the eager answers
// at other sizes.
TEST(Conv3d, ExportsWithFreeSizes) {
  const testing::ScratchDir dir;
  manual_seed(6);
  nn::Sequential net(nn::Conv3d(2, 4, 3, 1, 1), nn::ReLU(), nn::Conv3d(4, 2, {2, 3, 3}, {1, 2, 2}));
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 2, 4, 6, 6}));
  net.export_model(dir.file("video"), {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "depth"}}}}});
  LoadedModel loaded = load(dir.file("video"));
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 2, depth - 1, 2, 2]");
  for (int64_t depth : {2, 4, 9}) {
    Tensor x = randn({3, 2, depth, 6, 6});
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-5);
  }
}

}  // namespace
}  // namespace tandem
