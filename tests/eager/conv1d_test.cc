// nn::Conv1d: against a float64 loop over every option, its gradient against
// central differences, torch's parameter shapes, and export with a free
// length (a stride of 1 follows it; a larger stride's floor division is
// refused).
#include <unistd.h>

#include <filesystem>
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

namespace tandem {
namespace {

using ::testing::AllOf;
using testing::check_gradient;
using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::Values;
using testing::values_of;

// y[n, o, l] = b[o] + sum over c in o's group and k of
// w[o, c, k] * x[n, g * C/g + c, l * stride + k * dilation - padding].
Values conv1d_reference(const Values& x, const Values& w, const Values& b, int64_t batch,
                        int64_t in, int64_t length, const nn::Conv1dOptions& o) {
  const int64_t out_length =
      (length + 2 * o.padding - o.dilation * (o.kernel_size - 1) - 1) / o.stride + 1;
  const int64_t in_per_group = in / o.groups, out_per_group = o.out_channels / o.groups;
  Values y;
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t oc = 0; oc < o.out_channels; ++oc) {
      const int64_t group = oc / out_per_group;
      for (int64_t l = 0; l < out_length; ++l) {
        double total = b.empty() ? 0 : b[static_cast<size_t>(oc)];
        for (int64_t c = 0; c < in_per_group; ++c) {
          for (int64_t k = 0; k < o.kernel_size; ++k) {
            const int64_t at = l * o.stride + k * o.dilation - o.padding;
            if (at < 0 || at >= length) continue;
            const int64_t channel = group * in_per_group + c;
            total += w[static_cast<size_t>((oc * in_per_group + c) * o.kernel_size + k)] *
                     x[static_cast<size_t>((n * in + channel) * length + at)];
          }
        }
        y.push_back(total);
      }
    }
  }
  return y;
}

TEST(Conv1d, MatchesAFloat64LoopForEveryOption) {
  manual_seed(3);
  const std::vector<nn::Conv1dOptions> cases = {
      {.in_channels = 3, .out_channels = 4, .kernel_size = 3},
      {.in_channels = 4, .out_channels = 6, .kernel_size = 2, .stride = 2, .padding = 1},
      {.in_channels = 4,
       .out_channels = 4,
       .kernel_size = 3,
       .padding = 2,
       .dilation = 2,
       .groups = 2},
      {.in_channels = 2, .out_channels = 2, .kernel_size = 1, .groups = 2, .bias = false},
  };
  for (nn::Conv1dOptions o : cases) {
    o.dtype = DType::kFloat64;
    nn::Conv1d conv(o);
    SCOPED_TRACE(conv.extra_repr());
    EXPECT_EQ(conv.weight().shape(),
              Shape({o.out_channels, o.in_channels / o.groups, o.kernel_size}));  // torch's layout
    Tensor x = randn({2, o.in_channels, 7}, DType::kFloat64);
    const Values bias = o.bias ? values_of(conv.bias()) : Values{};
    expect_near(
        values_of(conv(x)),
        conv1d_reference(values_of(x), values_of(conv.weight()), bias, 2, o.in_channels, 7, o),
        1e-12);
    check_gradient([&](const Tensor& t) { return conv(t); }, x);
  }
  EXPECT_THAT(error_of([] { nn::Conv1d(3, 4, 0); }), HasSubstr("Conv1d needs positive"));
  EXPECT_THAT(error_of([] { nn::Conv1d(3, 4, 2, 1, 0, 1, 2); }),
              HasSubstr("Conv1d: in_channels (3) and out_channels (4) must be multiples"));
  nn::Conv1d conv(3, 4, 3);
  EXPECT_THAT(error_of([&] {
                conv(randn({2, 5, 7}));
              }),
              HasSubstr("expects input of shape [N, 3, L], got [2, 5, 7]"));
}

// Verifies that a stride-1 Conv1d exports with its length free and gives the
// eager answers at other lengths, and that a stride-2 one is refused there
// (its output length rounds down) but exports with the batch free.
TEST(Conv1d, ExportsWithAFreeLengthAtStrideOne) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / str_cat("tandem-conv1d-", ::getpid())).string();
  std::filesystem::create_directories(dir);
  manual_seed(4);
  nn::Sequential net(nn::Conv1d(3, 8, 3, 1, 1), nn::ReLU(), nn::Conv1d(8, 2, 5, 1, 0, 2));
  net.eval();
  net.hybridize();
  NoGradGuard no_grad;
  net(randn({2, 3, 16}));
  net.export_model(dir + "/net", {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "len"}}}}});
  LoadedModel loaded = load(dir + "/net");
  EXPECT_EQ(loaded.outputs()[0].shape_text(), "[batch, 2, len - 8]");
  for (int64_t length : {9, 16, 40}) {
    Tensor x = randn({3, 3, length});
    expect_near(values_of(loaded.run({x})[0]), values_of(net.forward(x)), 1e-5);
  }
  nn::Sequential strided(nn::Conv1d(3, 4, 3, 2));
  strided.eval();
  strided.hybridize();
  strided(randn({2, 3, 16}));
  EXPECT_THAT(
      error_of([&] {
        strided.export_model(dir + "/strided", {.dynamic_dims = {{"input0", {{2, "len"}}}}});
      }),
      HasSubstr("no sum of products of the free dimensions"));
  // At stride 3 and length 9 the output length is 3 at every size the
  // grid traces (7, 8, 9), so it looks fixed there; the sweep beyond the
  // grid finds other lengths (1 at length 1).
  nn::Sequential steps(nn::Conv1d(3, 4, 1, 3));
  steps.eval();
  steps.hybridize();
  steps(randn({2, 3, 9}));
  EXPECT_THAT(error_of([&] {
                steps.export_model(dir + "/steps", {.dynamic_dims = {{"input0", {{2, "len"}}}}});
              }),
              AllOf(HasSubstr("at len = 1, node 2 (conv2d in '0'"),
                    HasSubstr("gives shape [2, 4, 1, 1] where the trace says [2, 4, 1, 3]"),
                    HasSubstr("follows len in steps")));
  strided.export_model(dir + "/strided");
  Tensor x = randn({5, 3, 16});
  expect_near(values_of(load(dir + "/strided").run({x})[0]), values_of(strided.forward(x)), 1e-5);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
