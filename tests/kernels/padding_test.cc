// Rows for padding.cc's edge modes (reflect, replicate, circular) and
// pad_backward, and their error messages; the constant mode's rows are with
// the shape ops. The reference spells each padded axis as the list of input
// positions it reads, built the way the mode is described (a mirror, a run
// of edge copies, the axis repeated), not by the kernels' formula.
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

// The input positions an axis of `size` padded by `before` and `after` reads.
Ints positions(const std::string& mode, int64_t size, int64_t before, int64_t after) {
  Ints left, middle, right;
  for (int64_t i = 0; i < size; ++i) middle.push_back(i);
  if (mode == "reflect") {
    for (int64_t k = before; k >= 1; --k) left.push_back(k);
    for (int64_t k = 1; k <= after; ++k) right.push_back(size - 1 - k);
  } else if (mode == "replicate") {
    left.assign(before, 0);
    right.assign(after, size - 1);
  } else {  // circular: the axis repeated on both sides, as often as needed.
    Ints repeated;
    for (int64_t copy = 0; copy < before / size + 1; ++copy) {
      repeated.insert(repeated.end(), middle.begin(), middle.end());
    }
    left.assign(repeated.end() - before, repeated.end());
    for (int64_t k = 0; k < after; ++k) right.push_back(k % size);
  }
  left.insert(left.end(), middle.begin(), middle.end());
  left.insert(left.end(), right.begin(), right.end());
  return left;
}

std::vector<Ints> axis_positions(const std::string& mode, const Shape& input, const Ints& pads) {
  std::vector<Ints> axes;
  for (int d = 0; d < input.rank(); ++d) {
    axes.push_back(positions(mode, input[d], pads[2 * d], pads[2 * d + 1]));
  }
  return axes;
}

Tensor padded(const Tensor& x, const std::string& mode, const Ints& pads) {
  HostTensor host(x);
  std::vector<Ints> axes = axis_positions(mode, host.shape, pads);
  Shape::Dims dims;
  for (const Ints& axis : axes) dims.push_back(static_cast<int64_t>(axis.size()));
  return build(Shape(dims), x.dtype(), [&](const Index& o) {
    Index from;
    for (size_t d = 0; d < o.size(); ++d) from.push_back(axes[d][o[d]]);
    return host.at(from);
  });
}

// Each gradient element added to the input element its position read.
Tensor pad_backward_reference(const Tensor& g, const std::string& mode, const Ints& pads) {
  HostTensor grad(g);
  Shape::Dims dims;
  for (int d = 0; d < grad.shape.rank(); ++d)
    dims.push_back(grad.shape[d] - pads[2 * d] - pads[2 * d + 1]);
  Shape input(dims);
  std::vector<Ints> axes = axis_positions(mode, input, pads);
  std::vector<double> dx(static_cast<size_t>(input.numel()), 0.0);
  for_each_index(grad.shape, [&](const Index& o) {
    int64_t flat = 0;
    for (size_t d = 0; d < o.size(); ++d) flat = flat * input[static_cast<int>(d)] + axes[d][o[d]];
    dx[flat] += grad.at(o);
  });
  return result(dx, input, g.dtype());
}

TANDEM_OP_TEST_ROWS(padding) {
  std::vector<OpTestCase> rows;
  struct Case {
    std::string name;
    Shape shape;
    Ints pads;
  };
  const std::vector<Case> cases = {
      {"last_axis", {2, 5}, {0, 0, 3, 2}},
      {"both_axes", {3, 4}, {2, 1, 1, 3}},
      {"three_axes", {2, 3, 4}, {1, 0, 0, 2, 3, 1}},
      {"no_padding", {2, 3}, {0, 0, 0, 0}},
  };
  uint64_t seed = 1;
  for (const char* mode : {"reflect", "replicate", "circular"}) {
    for (const Case& c : cases) {
      Attrs attrs{{"pads", c.pads}, {"mode", std::string(mode)}};
      rows.push_back(row("pad", std::string(mode) + "_" + c.name, {random_tensor(c.shape, seed++)},
                         attrs, [m = std::string(mode), pads = c.pads](const Inputs& in) {
                           return padded(in[0], m, pads);
                         }));
    }
    Attrs attrs{{"pads", Ints{1, 2}}, {"mode", std::string(mode)}};
    rows.push_back(row("pad", std::string(mode) + "_int32",
                       {tensor_of({4, -1, 7}, {3}, DType::kInt32)}, attrs,
                       [m = std::string(mode)](const Inputs& in) {
                         return padded(in[0], m, {1, 2});
                       }));
    Attrs backward{{"pads", Ints{1, 1, 2, 0}}, {"mode", std::string(mode)}};
    rows.push_back(row("pad_backward", mode, {random_tensor({5, 5}, seed++)}, backward,
                       [m = std::string(mode)](const Inputs& in) {
                         return pad_backward_reference(in[0], m, {1, 1, 2, 0});
                       }));
  }
  // Circular padding wider than the axis wraps more than once.
  rows.push_back(row("pad", "circular_wraps_twice", {random_tensor({2, 2}, seed++)},
                     {{"pads", Ints{0, 0, 5, 3}}, {"mode", std::string("circular")}},
                     [](const Inputs& in) {
                       return padded(in[0], "circular", {0, 0, 5, 3});
                     }));
  return rows;
}

// Verifies that each mode's limits are checked at the call.
TEST(PaddingOpsTest, CallErrors) {
  Tensor x = random_tensor({2, 3}, 1);
  auto pad = [&](const Tensor& t, Ints pads, std::string mode) {
    return error_of([&] { call("pad", {t}, {{"pads", pads}, {"mode", mode}}); });
  };
  std::string what = pad(x, {0, 0, 3, 0}, "reflect");
  EXPECT_THAT(what, HasSubstr("pad"));
  EXPECT_THAT(what, HasSubstr("reflect padding by 3 and 0 on axis 1 of shape [2, 3] needs each "
                              "pad below the axis's size 3"));
  EXPECT_THAT(pad(random_tensor({2, 0}, 2), {0, 0, 1, 0}, "replicate"),
              HasSubstr("replicate padding of axis 1 of shape [2, 0] has nothing to repeat"));
  EXPECT_THAT(pad(x, {0, 0, 1, 1}, "mirror"),
              HasSubstr("unknown padding mode 'mirror'; expected constant, reflect, replicate or "
                        "circular"));
  EXPECT_THAT(pad(x, {1, 1}, "circular"), HasSubstr("pads [1, 1] has 2 entries"));
  // A constant pad of an empty axis is fine: nothing is read.
  EXPECT_EQ(call("pad", {random_tensor({2, 0}, 3)}, {{"pads", Ints{0, 0, 1, 1}}})[0].shape(),
            Shape({2, 2}));
}

}  // namespace
}  // namespace tandem::kernels::testing
