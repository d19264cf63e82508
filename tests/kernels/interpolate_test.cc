// Rows for interpolate.cc (interpolate, interpolate_backward) and its error
// messages. The reference resizes one axis at a time, with each axis's
// coordinates written from torch's documented formulas, where the kernels
// weigh the 2^d corners at once; the backward reference is the transpose
// of the forward's linear map, built column by column from unit inputs.
#include <cmath>
#include <cstdint>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;
using Ints = std::vector<int64_t>;

struct Sampling {
  std::string mode;
  bool align_corners = false;
};

// x resized along `axis` to `size` (one axis).
HostTensor resize_axis(const HostTensor& x, int axis, int64_t size, const Sampling& s) {
  Shape::Dims dims(x.shape.begin(), x.shape.end());
  const int64_t in = dims[axis];
  dims[axis] = size;
  Tensor out = build(Shape(dims), DType::kFloat64, [&](const Index& o) {
    const double position = static_cast<double>(o[axis]);
    Index at = o;
    if (s.mode == "nearest") {
      at[axis] = static_cast<int64_t>(std::floor(position * static_cast<double>(in) / size));
      return x.at(at);
    }
    double source = s.align_corners
                        ? (size == 1 ? 0.0 : position * (in - 1) / static_cast<double>(size - 1))
                        : std::max(0.0, (position + 0.5) * in / static_cast<double>(size) - 0.5);
    const int64_t low = std::min<int64_t>(static_cast<int64_t>(std::floor(source)), in - 1);
    const double frac = source - static_cast<double>(low);
    at[axis] = low;
    const double a = x.at(at);
    at[axis] = std::min(low + 1, in - 1);
    return (1 - frac) * a + frac * x.at(at);
  });
  return HostTensor(out);
}

Tensor resized(const Tensor& x, const Ints& size, const Sampling& s) {
  HostTensor result(x);
  for (size_t k = 0; k < size.size(); ++k) {
    result = resize_axis(result, static_cast<int>(k) + 2, size[k], s);
  }
  return tandem::kernels::testing::result(result.values, result.shape, x.dtype());
}

// The transpose of x -> resized(x): dx[i] = sum_o g[o] * resized(e_i)[o].
Tensor resized_adjoint(const Tensor& g, const Ints& input_size, const Sampling& s) {
  HostTensor grad(g);
  Shape::Dims dims(grad.shape.begin(), grad.shape.end());
  for (size_t k = 0; k < input_size.size(); ++k) dims[k + 2] = input_size[k];
  Shape input(dims);
  Ints size(grad.shape.begin() + 2, grad.shape.end());
  std::vector<double> dx(static_cast<size_t>(input.numel()));
  for (int64_t i = 0; i < input.numel(); ++i) {
    std::vector<double> unit(static_cast<size_t>(input.numel()), 0.0);
    unit[static_cast<size_t>(i)] = 1;
    HostTensor column(resized(result(unit, input), size, s));
    for (size_t o = 0; o < grad.values.size(); ++o) dx[i] += grad.values[o] * column.values[o];
  }
  return result(dx, input, g.dtype());
}

Attrs attrs_of(const char* name, const Ints& sizes, const Sampling& s) {
  return {{name, sizes}, {"mode", s.mode}, {"align_corners", s.align_corners}};
}

TANDEM_OP_TEST_ROWS(interpolate) {
  struct Case {
    std::string name;
    Shape input;
    Ints size;
    Sampling sampling;
  };
  const Sampling nearest{"nearest"}, linear{"linear"}, corners{"linear", true};
  const std::vector<Case> cases = {
      {"nearest_1d_up", {2, 3, 4}, {7}, nearest},
      {"nearest_2d_down", {1, 2, 5, 6}, {3, 4}, nearest},
      {"nearest_3d", {1, 1, 2, 3, 2}, {4, 2, 3}, nearest},
      {"linear_1d_up", {2, 2, 5}, {8}, linear},
      {"linear_2d_down", {1, 2, 4, 5}, {2, 3}, linear},
      {"linear_2d_align_corners", {1, 2, 3, 4}, {5, 7}, corners},
      {"linear_3d", {1, 1, 2, 3, 2}, {3, 4, 3}, linear},
      {"linear_to_one", {1, 1, 4, 3}, {1, 1}, linear},
      {"align_corners_to_one", {1, 1, 4, 3}, {1, 2}, corners},
      {"same_size", {2, 1, 3, 3}, {3, 3}, linear},
  };
  std::vector<OpTestCase> rows;
  uint64_t seed = 1;
  for (const Case& c : cases) {
    rows.push_back(
        row("interpolate", c.name, {random_tensor(c.input, seed++)},
            attrs_of("size", c.size, c.sampling),
            [size = c.size, s = c.sampling](const Inputs& in) { return resized(in[0], size, s); }));
    Shape::Dims out(c.input.begin(), c.input.end());
    for (size_t k = 0; k < c.size.size(); ++k) out[k + 2] = c.size[k];
    Ints input_size(c.input.begin() + 2, c.input.end());
    rows.push_back(row("interpolate_backward", c.name, {random_tensor(Shape(out), seed++)},
                       attrs_of("input_size", input_size, c.sampling),
                       [input_size, s = c.sampling](const Inputs& in) {
                         return resized_adjoint(in[0], input_size, s);
                       }));
  }
  add_both(rows, row("interpolate", "float32_linear", {random_tensor({2, 3, 4, 4}, seed++)},
                     attrs_of("size", {6, 5}, linear), [](const Inputs& in) {
                       return resized(in[0], {6, 5}, Sampling{"linear"});
                     }));
  return rows;
}

// Verifies that sizes, ranks, modes and dtypes are checked at the call.
TEST(InterpolateOpsTest, CallErrors) {
  Tensor x = random_tensor({1, 2, 3, 4}, 1);
  auto error = [&](const Tensor& t, Ints size, std::string mode, bool align_corners = false) {
    return error_of([&] {
      call("interpolate", {t}, {{"size", size}, {"mode", mode}, {"align_corners", align_corners}});
    });
  };
  std::string what = error(x, {6}, "nearest");
  EXPECT_THAT(what, HasSubstr("interpolate"));
  EXPECT_THAT(what, HasSubstr("size [6] must give 1 to 3 spatial sizes, one for each axis after "
                              "[N, C] of [1, 2, 3, 4]"));
  EXPECT_THAT(error(x, {6, 0}, "linear"), HasSubstr("sizes must be at least 1"));
  EXPECT_THAT(error(x, {6, 8}, "cubic"), HasSubstr("unknown interpolation mode 'cubic'"));
  EXPECT_THAT(error(x, {6, 8}, "nearest", true),
              HasSubstr("align_corners applies to linear interpolation only"));
  EXPECT_THAT(error(random_tensor({1, 1, 0, 2}, 2), {2, 2}, "linear"),
              HasSubstr("cannot interpolate from an empty axis"));
  EXPECT_THAT(error(tensor_of({1, 2}, {1, 1, 2}, DType::kInt32), {4}, "nearest"),
              HasSubstr("x must be float32 or float64, got int32"));
}

}  // namespace
}  // namespace tandem::kernels::testing
