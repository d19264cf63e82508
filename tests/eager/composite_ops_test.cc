// The composite ops (eager/composite_ops.h) against plain loops over the
// same values, their gradients against central differences, their errors,
// and a function of all of them hybridized, exported and loaded at the
// traced batch size and another.
#include "eager/composite_ops.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/ops.h"
#include "serialization/model.h"
#include "tests/eager/float64_values.h"
#include "tests/error_of.h"

namespace tandem {
namespace {

using testing::check_gradient;
using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::Values;
using testing::values_of;

constexpr double kInf = std::numeric_limits<double>::infinity();

// x [2, 3, 4] in float64, x[a][b][c] = values[(a * 3 + b) * 4 + c].
Tensor sample() {
  manual_seed(41);
  return randn({2, 3, 4}, DType::kFloat64);
}

// The element of a [2, 3, 4] tensor's values at (a, b, c).
double at(const Values& v, int64_t a, int64_t b, int64_t c) { return v[(a * 3 + b) * 4 + c]; }

// Fills a [2, 3, 4] result from f(a, b, c).
Values each(const std::function<double(int64_t, int64_t, int64_t)>& f) {
  Values out;
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 4; ++c) out.push_back(f(a, b, c));
  return out;
}

TEST(CompositeOps, MaskedFill) {
  Tensor x = sample();
  std::vector<bool> bits = {true, false, false, true};
  Tensor mask = Tensor::from_vector(bits, {4});  // Broadcast over the last axis.
  const Values v = values_of(x);
  expect_near(
      values_of(masked_fill(x, mask, -5.0)),
      each([&](int64_t a, int64_t b, int64_t c) { return bits[c] ? -5.0 : at(v, a, b, c); }), 0);
  check_gradient([&](const Tensor& t) { return masked_fill(t, mask, 2.0); }, x);
  EXPECT_THAT(error_of([&] { masked_fill(x, ones({4}), 0.0); }),
              HasSubstr("the mask must be bool"));
}

TEST(CompositeOps, LogSumExp) {
  Tensor x = sample();
  const Values v = values_of(x);
  Values want;
  for (int64_t a = 0; a < 2; ++a) {
    for (int64_t c = 0; c < 4; ++c) {
      double total = 0;
      for (int64_t b = 0; b < 3; ++b) total += std::exp(at(v, a, b, c));
      want.push_back(std::log(total));
    }
  }
  Tensor y = logsumexp(x, {1});
  EXPECT_EQ(y.shape(), Shape({2, 4}));
  expect_near(values_of(y), want, 1e-12);
  EXPECT_EQ(logsumexp(x, {-2}, /*keepdims=*/true).shape(), Shape({2, 1, 4}));
  double everything = 0;
  for (double e : v) everything += std::exp(e);
  expect_near(values_of(logsumexp(x)), {std::log(everything)}, 1e-12);
  // No overflow at large values; -inf and +inf rows as torch.
  Tensor extreme = Tensor::from_vector<double>({1000, 1000, -kInf, -kInf, kInf, 1}, {3, 2});
  Values got = values_of(logsumexp(extreme, {1}));
  EXPECT_NEAR(got[0], 1000 + std::log(2.0), 1e-12);
  EXPECT_EQ(got[1], -kInf);
  EXPECT_EQ(got[2], kInf);
  check_gradient([](const Tensor& t) { return logsumexp(t, {-1}); }, x);
}

TEST(CompositeOps, TrilAndTriu) {
  Tensor x = sample();
  const Values v = values_of(x);
  for (int64_t k : {-1, 0, 2}) {
    SCOPED_TRACE(str_cat("diagonal ", k));
    expect_near(
        values_of(tril(x, k)),
        each([&](int64_t a, int64_t b, int64_t c) { return c - b <= k ? at(v, a, b, c) : 0; }), 0);
    expect_near(
        values_of(triu(x, k)),
        each([&](int64_t a, int64_t b, int64_t c) { return c - b >= k ? at(v, a, b, c) : 0; }), 0);
  }
  check_gradient([](const Tensor& t) { return tril(t, 1); }, x);
  EXPECT_THAT(error_of([] { tril(ones({3})); }), HasSubstr("tril needs at least two axes"));
}

TEST(CompositeOps, FlipRollAndTile) {
  Tensor x = sample();
  const Values v = values_of(x);
  expect_near(values_of(flip(x, {0, -1})),
              each([&](int64_t a, int64_t b, int64_t c) { return at(v, 1 - a, b, 3 - c); }), 0);
  for (int64_t shift : {-7, 0, 2, 5}) {
    SCOPED_TRACE(str_cat("shift ", shift));
    const int64_t s = ((shift % 3) + 3) % 3;
    expect_near(values_of(roll(x, shift, 1)),
                each([&](int64_t a, int64_t b, int64_t c) { return at(v, a, (b - s + 3) % 3, c); }),
                0);
  }
  Tensor tiled = tile(x, {1, 2, 3});
  EXPECT_EQ(tiled.shape(), Shape({2, 6, 12}));
  const Values t = values_of(tiled);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 6; ++b)
      for (int64_t c = 0; c < 12; ++c) ASSERT_EQ(t[(a * 6 + b) * 12 + c], at(v, a, b % 3, c % 4));
  check_gradient([](const Tensor& y) { return flip(y, {1}); }, x);
  check_gradient([](const Tensor& y) { return roll(y, -1, 2); }, x);
  check_gradient([](const Tensor& y) { return tile(y, {2, 1, 2}); }, x);
  EXPECT_THAT(error_of([&] { flip(x, {1, -2}); }), HasSubstr("flip: axis -2 is listed twice"));
  EXPECT_THAT(error_of([&] { flip(x, {3}); }),
              HasSubstr("flip: axis 3 is out of range for shape [2, 3, 4]"));
  EXPECT_THAT(error_of([&] { roll(x, 1, -4); }), HasSubstr("roll: axis -4 is out of range"));
  EXPECT_THAT(error_of([&] { tile(x, {1, 2}); }), HasSubstr("tile: reps has 2 entries"));
  EXPECT_THAT(error_of([&] { tile(x, {1, 0, 1}); }), HasSubstr("reps[1] = 0 must be >= 1"));
}

// max_pool2d_with_indices and max_unpool2d against a loop over the windows:
// the indices name each window's first maximum within its plane, and
// unpooling puts every maximum back there, zeros elsewhere; its gradient
// reads the output's gradient at those places.
TEST(CompositeOps, MaxPoolIndicesAndUnpool) {
  manual_seed(9);
  Tensor x = randn({2, 3, 5, 6}, DType::kFloat64);
  const Values v = values_of(x);
  auto [values, indices] = max_pool2d_with_indices(x, {2, 2}, {2, 2});
  ASSERT_EQ(indices.shape(), Shape({2, 3, 2, 3}));
  EXPECT_EQ(indices.dtype(), DType::kInt64);
  const Values got = values_of(indices), pooled = values_of(values);
  Values want_unpooled(2 * 3 * 4 * 6, 0.0);
  for (int64_t plane = 0; plane < 6; ++plane) {
    for (int64_t oy = 0; oy < 2; ++oy) {
      for (int64_t ox = 0; ox < 3; ++ox) {
        int64_t best = -1;
        for (int64_t iy = 2 * oy; iy < 2 * oy + 2; ++iy) {
          for (int64_t ix = 2 * ox; ix < 2 * ox + 2; ++ix) {
            if (best < 0 || v[plane * 30 + iy * 6 + ix] > v[plane * 30 + best]) best = iy * 6 + ix;
          }
        }
        const int64_t o = (plane * 2 + oy) * 3 + ox;
        ASSERT_EQ(got[o], best) << "window " << o;
        EXPECT_EQ(pooled[o], v[plane * 30 + best]);
        want_unpooled[plane * 24 + best] = v[plane * 30 + best];  // Into [4, 6] planes.
      }
    }
  }
  // The default size would be [4, 6]; output_size says so too.
  expect_near(values_of(max_unpool2d(values, indices, {2, 2})), want_unpooled, 0);
  expect_near(values_of(max_unpool2d(values, indices, {2, 2}, {}, {0, 0}, {4, 6})), want_unpooled,
              0);
  check_gradient([&](const Tensor& y) { return max_unpool2d(y, indices, {2, 2}); }, values);
  // A plane too small for the indices: the scatter names the first index
  // past it.
  EXPECT_THAT(error_of([&] {
                values_of(max_unpool2d(values, indices, {2, 2}, {}, {0, 0}, {2, 2}));
              }),
              HasSubstr("is out of range for axis 2 of size 4"));
  EXPECT_THAT(error_of([&] {
                max_unpool2d(values, cast(indices, DType::kInt32), {2, 2});
              }),
              HasSubstr("max_unpool2d: indices must be int64 of x's shape [2, 3, 2, 3]"));
}

// One function of all of them, traced at batch 2, replayed, exported and
// loaded, then run at batch 3.
TEST(CompositeOps, OneAnswerInEveryMode) {
  const auto f = [](const Tensor& x) {
    Tensor y = tile(roll(flip(tril(x, 1), {-1}), 1, 1), {1, 2, 1});
    y = masked_fill(y, gt(y, full({}, 1.0)), 1.0);
    // [batch, 1, 6, 4] pooled and put back.
    Tensor image = reshape(y, {y.shape()[0], 1, 6, 4});
    auto [pooled, where] = max_pool2d_with_indices(image, {2, 2});
    y = add(y, reshape(max_unpool2d(pooled, where, {2, 2}), {y.shape()[0], 6, 4}));
    return logsumexp(y, {-1});
  };
  NoGradGuard no_grad;
  auto run =
      hybridize([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; });
  Tensor traced = randn({2, 3, 4}), other = randn({3, 3, 4});
  expect_near(values_of(run({traced})[0]), values_of(f(traced)), 1e-6);
  expect_near(values_of(run({traced})[0]), values_of(f(traced)), 1e-6);
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-composite-", ::getpid());
  fs::create_directories(dir);
  run.export_model((dir / "f").string());
  LoadedModel loaded = load((dir / "f").string());
  expect_near(values_of(loaded.run({traced})[0]), values_of(f(traced)), 1e-6);
  expect_near(values_of(loaded.run({other})[0]), values_of(f(other)), 1e-6);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
