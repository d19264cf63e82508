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

// Verifies that Conv1d stacks export with the batch and the length free and
// give the eager answers at other lengths: at stride 1 (lengths that are
// polynomials), and strided, where the output length rounds down (a floor
// division the fit derives from the ops' shape inference), alone, two in a
// stack, and one whose output looks fixed at the lengths the grid traces.
TEST(Conv1d, ExportsWithAFreeLengthAtEveryStride) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / str_cat("tandem-conv1d-", ::getpid())).string();
  std::filesystem::create_directories(dir);
  manual_seed(4);
  struct Case {
    std::string name;
    nn::Sequential net;
    int64_t traced_length;
    std::string output_shape;
    std::vector<int64_t> lengths;
  };
  std::vector<Case> cases;
  cases.push_back(
      {"dense",
       nn::Sequential(nn::Conv1d(3, 8, 3, 1, 1), nn::ReLU(), nn::Conv1d(8, 2, 5, 1, 0, 2)),
       16,
       "[batch, 2, len - 8]",
       {9, 16, 40}});
  cases.push_back({"strided",
                   nn::Sequential(nn::Conv1d(3, 4, 3, 2)),
                   16,
                   "[batch, 4, floordiv(len + 1, 2) - 1]",
                   {3, 4, 9, 16, 17, 40}});
  // At stride 3 and length 9 the output length is 3 at all the lengths
  // the grid traces (7, 8, 9); the check points further away see it move.
  cases.push_back({"steps",
                   nn::Sequential(nn::Conv1d(3, 4, 1, 3)),
                   9,
                   "[batch, 4, floordiv(len + 2, 3)]",
                   {1, 2, 3, 4, 8, 9, 10, 31}});
  cases.push_back({"stack",
                   nn::Sequential(nn::Conv1d(3, 4, 3, 2, 1), nn::ReLU(), nn::Conv1d(4, 2, 5, 3)),
                   16,
                   "[batch, 2, floordiv(len + 3, 6) - 1]",
                   {9, 10, 11, 12, 20, 21, 50}});
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.net.eval();
    c.net.hybridize();
    NoGradGuard no_grad;
    c.net(randn({2, 3, c.traced_length}));
    const std::string path = dir + "/" + c.name;
    c.net.export_model(path, {.dynamic_dims = {{"input0", {{0, "batch"}, {2, "len"}}}}});
    LoadedModel loaded = load(path);
    EXPECT_EQ(loaded.outputs()[0].shape_text(), c.output_shape);
    for (int64_t length : c.lengths) {
      SCOPED_TRACE(str_cat("length ", length));
      Tensor x = randn({3, 3, length});
      const Tensor expected = c.net.forward(x), got = loaded.run({x})[0];
      EXPECT_EQ(got.shape(), expected.shape());
      expect_near(values_of(got), values_of(expected), 1e-5);
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tandem
