// Rows for norm.cc (batch_norm, layer_norm and their backward ops) and its
// error messages.
//
// The forward references are direct loops in double. The backward ops are
// checked against central differences of those references (a route that
// shares nothing with the kernels' closed-form gradients).
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;
using Values = std::vector<std::vector<double>>;

// batch_norm on values: in = {x, gamma, beta, running_mean, running_var};
// returns {y, mean, var}.
Values batch_norm_values(const Values& in, const Shape& xs, bool training, double eps) {
  const int64_t n = xs[0], c = xs[1], s = xs.numel() / std::max<int64_t>(n * c, 1);
  std::vector<double> y(in[0].size()), mean(c), var(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    if (training) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < s; ++j) sum += in[0][(i * c + ch) * s + j];
      }
      mean[ch] = sum / static_cast<double>(n * s);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < s; ++j) sq += std::pow(in[0][(i * c + ch) * s + j] - mean[ch], 2);
      }
      var[ch] = sq / static_cast<double>(n * s);
    } else {
      mean[ch] = in[3][ch];
      var[ch] = in[4][ch];
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < s; ++j) {
        int64_t k = (i * c + ch) * s + j;
        y[k] = in[1][ch] * (in[0][k] - mean[ch]) / std::sqrt(var[ch] + eps) + in[2][ch];
      }
    }
  }
  return {y, mean, var};
}

// d/d in[i] of sum_k <f(in)_k, cotangent_k>, by central differences.
Values numeric_gradients(const Values& in, const Values& cotangents,
                         const std::function<Values(const Values&)>& f) {
  auto loss = [&](const Values& v) {
    Values out = f(v);
    double total = 0;
    for (size_t k = 0; k < out.size(); ++k) {
      for (size_t e = 0; e < out[k].size(); ++e) total += out[k][e] * cotangents[k][e];
    }
    return total;
  };
  const double h = 1e-5;
  Values grads;
  for (size_t i = 0; i < in.size(); ++i) {
    std::vector<double> g(in[i].size());
    for (size_t e = 0; e < in[i].size(); ++e) {
      Values plus = in, minus = in;
      plus[i][e] += h;
      minus[i][e] -= h;
      g[e] = (loss(plus) - loss(minus)) / (2 * h);
    }
    grads.push_back(g);
  }
  return grads;
}

Tensor positive(Shape shape, uint64_t seed) { return random_tensor(shape, seed, 0.5, 1.5); }

OpTestCase batch_norm_row(std::string name, Shape x, bool training, double eps = 1e-5) {
  Shape c{x[1]};
  return {.name = std::move(name),
          .op = "batch_norm",
          .inputs = {random_tensor(x, 1, -2, 2), positive(c, 2), random_tensor(c, 3),
                     random_tensor(c, 4), positive(c, 5)},
          .attrs = {{"training", training}, {"eps", eps}},
          .reference = [training, eps](const Inputs& in) {
            Values v;
            for (const Tensor& t : in) v.push_back(values_of(t));
            Values out = batch_norm_values(v, in[0].shape(), training, eps);
            Shape c{in[0].shape()[1]};
            DType dtype = in[0].dtype();
            return std::vector{result(out[0], in[0].shape(), dtype), result(out[1], c, dtype),
                               result(out[2], c, dtype)};
          }};
}

// batch_norm_backward(x, gamma, mean, var, grad_y, grad_mean, grad_var), with
// mean/var the statistics the forward produced.
OpTestCase batch_norm_backward_row(std::string name, Shape x, bool training) {
  const double eps = 1e-5;
  Shape c{x[1]};
  Tensor xt = random_tensor(x, 6, -2, 2), gamma = positive(c, 7), beta = random_tensor(c, 8);
  Tensor rm = random_tensor(c, 9), rv = positive(c, 10);
  Values forward = batch_norm_values(
      {values_of(xt), values_of(gamma), values_of(beta), values_of(rm), values_of(rv)}, x, training,
      eps);
  Tensor mean = tensor_of(forward[1], c), var = tensor_of(forward[2], c);
  return {.name = std::move(name),
          .op = "batch_norm_backward",
          .inputs = {xt, gamma, mean, var, random_tensor(x, 11), random_tensor(c, 12),
                     random_tensor(c, 13)},
          .attrs = {{"training", training}, {"eps", eps}},
          .reference =
              [training, eps, beta, rm, rv](const Inputs& in) {
                const Shape& xs = in[0].shape();
                Shape c{xs[1]};
                Values v = {values_of(in[0]), values_of(in[1]), values_of(beta), values_of(rm),
                            values_of(rv)};
                Values cot = {values_of(in[4]), values_of(in[5]), values_of(in[6])};
                Values g = numeric_gradients(v, cot, [&](const Values& p) {
                  return batch_norm_values(p, xs, training, eps);
                });
                DType dtype = in[0].dtype();
                return std::vector{result(g[0], xs, dtype), result(g[1], c, dtype),
                                   result(g[2], c, dtype), result(g[3], c, dtype),
                                   result(g[4], c, dtype)};
              },
          .tolerance = 1e-6};
}

// layer_norm on values: in = {x, gamma, beta}, normalizing rows of length d.
Values layer_norm_values(const Values& in, int64_t d, double eps) {
  const int64_t rows = static_cast<int64_t>(in[0].size()) / d;
  std::vector<double> y(in[0].size());
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < d; ++j) mean += in[0][r * d + j] / static_cast<double>(d);
    for (int64_t j = 0; j < d; ++j) var += std::pow(in[0][r * d + j] - mean, 2) / d;
    for (int64_t j = 0; j < d; ++j) {
      y[r * d + j] = (in[0][r * d + j] - mean) / std::sqrt(var + eps) * in[1][j] + in[2][j];
    }
  }
  return {y};
}

Shape trailing(const Shape& x, int axes) {
  return Shape(absl::Span<const int64_t>(x.dims().data() + x.rank() - axes, axes));
}

OpTestCase layer_norm_row(std::string name, Shape x, int axes, double eps = 1e-5) {
  Shape norm = trailing(x, axes);
  return {.name = std::move(name),
          .op = "layer_norm",
          .inputs = {random_tensor(x, 14, -2, 2), positive(norm, 15), random_tensor(norm, 16)},
          .attrs = {{"normalized_axes", int64_t{axes}}, {"eps", eps}},
          .reference = [eps](const Inputs& in) {
            Values out = layer_norm_values({values_of(in[0]), values_of(in[1]), values_of(in[2])},
                                           in[1].numel(), eps);
            return std::vector{result(out[0], in[0].shape(), in[0].dtype())};
          }};
}

OpTestCase layer_norm_backward_row(std::string name, Shape x, int axes) {
  Shape norm = trailing(x, axes);
  Tensor beta = random_tensor(norm, 17);
  return {.name = std::move(name),
          .op = "layer_norm_backward",
          .inputs = {random_tensor(x, 18, -2, 2), positive(norm, 19), random_tensor(x, 20)},
          .attrs = {{"normalized_axes", int64_t{axes}}},
          .reference =
              [beta](const Inputs& in) {
                Values v = {values_of(in[0]), values_of(in[1]), values_of(beta)};
                Values g = numeric_gradients(v, {values_of(in[2])}, [&](const Values& p) {
                  return layer_norm_values(p, in[1].numel(), 1e-5);
                });
                DType dtype = in[0].dtype();
                return std::vector{result(g[0], in[0].shape(), dtype),
                                   result(g[1], in[1].shape(), dtype),
                                   result(g[2], in[1].shape(), dtype)};
              },
          .tolerance = 1e-6};
}

TANDEM_OP_TEST_ROWS(norm) {
  std::vector<OpTestCase> rows;
  add_both(rows, batch_norm_row("training_3d", {3, 2, 2}, true));
  add_both(rows, batch_norm_row("training_2d", {4, 3}, true));
  add_both(rows, batch_norm_row("training_4d", {2, 2, 2, 2}, true, 1e-3));
  add_both(rows, batch_norm_row("eval_4d", {2, 3, 2, 2}, false));
  add_both(rows, batch_norm_row("eval_2d", {3, 2}, false, 0.1));
  rows.push_back(batch_norm_row("large_training_f32", {8, 16, 5, 5}, true));
  rows.push_back(batch_norm_row("large_eval_f32", {8, 16, 5, 5}, false));
  for (size_t i = rows.size() - 2; i < rows.size(); ++i) {
    for (Tensor& t : rows[i].inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
    rows[i].tolerance = 1e-5;
    rows[i].check_gradient = false;
  }
  add_both(rows, batch_norm_backward_row("training_3d", {3, 2, 2}, true), 1e-4);
  add_both(rows, batch_norm_backward_row("training_4d", {2, 2, 2, 2}, true), 1e-4);
  add_both(rows, batch_norm_backward_row("eval_4d", {2, 3, 2, 2}, false), 1e-4);

  add_both(rows, layer_norm_row("last_axis", {3, 4}, 1));
  add_both(rows, layer_norm_row("two_axes", {2, 3, 4}, 2));
  add_both(rows, layer_norm_row("vector", {5}, 1, 1e-3));
  add_both(rows, layer_norm_row("all_axes", {2, 3}, 2));
  rows.push_back(layer_norm_row("large_f32", {32, 64}, 1));
  for (Tensor& t : rows.back().inputs) t = tensor_of(values_of(t), t.shape(), DType::kFloat32);
  rows.back().tolerance = 1e-5;
  rows.back().check_gradient = false;
  add_both(rows, layer_norm_backward_row("last_axis", {3, 4}, 1), 1e-4);
  add_both(rows, layer_norm_backward_row("two_axes", {2, 2, 3}, 2), 1e-4);
  return rows;
}

// Verifies that batch_norm names mismatched parameter shapes and bad eps.
TEST(BatchNormTest, BadArgumentsAreNamed) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor c3 = random_tensor({3}, 2), c4 = random_tensor({4}, 3);
  EXPECT_THAT(error_of([&] {
                call("batch_norm", {x, c4, c3, c3, c3});
              }),
              HasSubstr("batch_norm: gamma must be [3] for x of shape [2, 3, 4], got shape [4]"));
  EXPECT_THAT(error_of([&] {
                call("batch_norm", {x, c3, c3, c3, c4});
              }),
              HasSubstr("running_var must be [3]"));
  EXPECT_THAT(error_of([&] {
                call("batch_norm", {random_tensor({3}, 1), c3, c3, c3, c3});
              }),
              HasSubstr("x must be [batch, channels, ...]"));
  EXPECT_THAT(error_of([&] {
                call("batch_norm", {x, c3, c3, c3, c3}, {{"eps", -1.0}});
              }),
              HasSubstr("eps must be a finite non-negative number"));
  // No value, or one, per channel: no batch variance to normalize by (one
  // value gave y = beta and a zero gradient, silently), as PyTorch refuses.
  for (Shape one : {Shape{0, 3}, Shape{1, 3}, Shape{1, 3, 1, 1}}) {
    SCOPED_TRACE(one.to_string());
    EXPECT_THAT(error_of([&] {
                  call("batch_norm", {random_tensor(one, 1), c3, c3, c3, c3}, {{"training", true}});
                }),
                HasSubstr(str_cat("batch_norm: expected more than 1 value per channel when "
                                  "training, got input of shape ",
                                  one.to_string())));
  }
  // Evaluation normalizes with the running statistics: any batch will do.
  EXPECT_EQ(call("batch_norm", {random_tensor({1, 3}, 1), c3, c3, c3, c3})[0].shape(),
            (Shape{1, 3}));
}

// Verifies that eval mode returns the running statistics unchanged.
TEST(BatchNormTest, EvalReturnsRunningStatistics) {
  Tensor x = random_tensor({2, 3, 2}, 1, -1, 1, DType::kFloat32);
  Tensor mean = tensor_of({0.1, 0.2, 0.3}, {3}, DType::kFloat32);
  Tensor var = tensor_of({1, 2, 3}, {3}, DType::kFloat32);
  Tensor ones = tensor_of({1, 1, 1}, {3}, DType::kFloat32);
  std::vector<Tensor> out = call("batch_norm", {x, ones, ones, mean, var});
  EXPECT_EQ(out[1].to_vector<float>(), mean.to_vector<float>());
  EXPECT_EQ(out[2].to_vector<float>(), var.to_vector<float>());
}

// Verifies that layer_norm checks normalized_axes and the parameter shapes.
TEST(LayerNormTest, BadArgumentsAreNamed) {
  Tensor x = random_tensor({2, 3, 4}, 1);
  Tensor p4 = random_tensor({4}, 2), p34 = random_tensor({3, 4}, 3);
  EXPECT_THAT(error_of([&] {
                call("layer_norm", {x, p34, p34});
              }),
              HasSubstr("gamma and beta must have the normalized shape [4]"));
  EXPECT_THAT(error_of([&] {
                call("layer_norm", {x, p4, p4}, {{"normalized_axes", int64_t{4}}});
              }),
              HasSubstr("normalized_axes must be in [1, 3] for x of shape [2, 3, 4], got 4"));
  EXPECT_NO_THROW(call("layer_norm", {x, p34, p34}, {{"normalized_axes", int64_t{2}}}));
}

}  // namespace
}  // namespace tandem::kernels::testing
