// Rows for softmax_loss.cc (softmax, log_softmax, cross_entropy, nll, mse and
// the backward ops) and its error messages.
#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

// Softmax (or its log) along `axis`, in long double.
Tensor reference_softmax(const Tensor& x, int axis, bool log) {
  const Shape& s = x.shape();
  axis = axis < 0 ? axis + s.rank() : axis;
  int64_t outer = 1, len = s[axis], inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  std::vector<double> v = values_of(x), out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * len + j) * inner + in; };
      long double max = v[at(0)], sum = 0;
      for (int64_t j = 1; j < len; ++j) max = std::max<long double>(max, v[at(j)]);
      for (int64_t j = 0; j < len; ++j) sum += std::exp(static_cast<long double>(v[at(j)]) - max);
      for (int64_t j = 0; j < len; ++j) {
        long double z = static_cast<long double>(v[at(j)]) - max;
        out[at(j)] = static_cast<double>(log ? z - std::log(sum) : std::exp(z) / sum);
      }
    }
  }
  return result(out, s, x.dtype());
}

OpTestCase softmax_row(const char* op, std::string name, Tensor x, int axis) {
  bool log = std::string(op) == "log_softmax";
  return {.name = std::move(name),
          .op = op,
          .inputs = {std::move(x)},
          .attrs = {{"axis", int64_t{axis}}},
          .reference = [axis, log](const Inputs& in) {
            return std::vector{reference_softmax(in[0], axis, log)};
          }};
}

Tensor reduce(const std::vector<double>& losses, const std::string& reduction, DType dtype) {
  if (reduction == "none") return result(losses, Shape{static_cast<int64_t>(losses.size())}, dtype);
  double total = 0;
  for (double l : losses) total += l;
  if (reduction == "mean") total /= static_cast<double>(losses.size());
  return result({total}, Shape{}, dtype);
}

// -sum_c q_c log softmax(x)_c with q = (1 - e) onehot(t) + e / C.
std::vector<double> cross_entropy_losses(const Tensor& logits, const Tensor& target, double e) {
  std::vector<double> lp = values_of(reference_softmax(logits, 1, true)), t = values_of(target);
  const int64_t n = logits.shape()[0], c = logits.shape()[1];
  std::vector<double> losses(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      double q = (j == static_cast<int64_t>(t[i]) ? 1 - e : 0) + e / static_cast<double>(c);
      losses[i] -= q * lp[i * c + j];
    }
  }
  return losses;
}

Tensor targets(std::vector<double> t) {
  return tensor_of(t, Shape{static_cast<int64_t>(t.size())}, DType::kInt64);
}

OpTestCase cross_entropy_row(std::string name, std::string reduction, double smoothing) {
  return {.name = std::move(name),
          .op = "cross_entropy",
          .inputs = {random_tensor({4, 5}, 11, -2, 2), targets({0, 3, 4, 1})},
          .attrs = {{"label_smoothing", smoothing}, {"reduction", reduction}},
          .reference = [reduction, smoothing](const Inputs& in) {
            return std::vector{
                reduce(cross_entropy_losses(in[0], in[1], smoothing), reduction, in[0].dtype())};
          }};
}

// The gradient of <loss, grad> by central differences of the reference
// (an independent route to the backward op's value).
Tensor numeric_loss_gradient(const Tensor& logits, const Tensor& target, const Tensor& grad,
                             const std::function<Tensor(const Tensor&)>& loss) {
  std::vector<double> x = values_of(logits), g = values_of(grad), out(x.size());
  auto at = [&](const std::vector<double>& v) {
    std::vector<double> l = values_of(loss(tensor_of(v, logits.shape())));
    double s = 0;
    for (size_t i = 0; i < l.size(); ++i) s += l[i] * g[i];
    return s;
  };
  const double h = 1e-5;
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<double> plus = x, minus = x;
    plus[i] += h;
    minus[i] -= h;
    out[i] = (at(plus) - at(minus)) / (2 * h);
  }
  (void)target;
  return result(out, logits.shape(), logits.dtype());
}

OpTestCase cross_entropy_backward_row(std::string name, std::string reduction, double smoothing) {
  Shape g_shape = reduction == "none" ? Shape{4} : Shape{};
  return {.name = std::move(name),
          .op = "cross_entropy_backward",
          .inputs = {random_tensor({4, 5}, 12, -2, 2), targets({2, 0, 4, 4}),
                     random_tensor(g_shape, 13, 0.5, 1.5)},
          .attrs = {{"label_smoothing", smoothing}, {"reduction", reduction}},
          .reference =
              [reduction, smoothing](const Inputs& in) {
                return std::vector{numeric_loss_gradient(in[0], in[1], in[2], [&](const Tensor& x) {
                  return reduce(cross_entropy_losses(x, in[1], smoothing), reduction,
                                DType::kFloat64);
                })};
              },
          .tolerance = 1e-6};
}

OpTestCase nll_row(std::string name, std::string reduction) {
  return {.name = std::move(name),
          .op = "nll",
          .inputs = {random_tensor({3, 4}, 14, -3, 0), targets({1, 0, 3})},
          .attrs = {{"reduction", reduction}},
          .reference = [reduction](const Inputs& in) {
            std::vector<double> lp = values_of(in[0]), t = values_of(in[1]), losses;
            for (size_t i = 0; i < t.size(); ++i)
              losses.push_back(-lp[i * 4 + static_cast<size_t>(t[i])]);
            return std::vector{reduce(losses, reduction, in[0].dtype())};
          }};
}

OpTestCase nll_backward_row(std::string name, std::string reduction) {
  Shape g_shape = reduction == "none" ? Shape{3} : Shape{};
  return {.name = std::move(name),
          .op = "nll_backward",
          .inputs = {random_tensor({3, 4}, 15, -3, 0), targets({3, 3, 0}),
                     random_tensor(g_shape, 16, 0.5, 1.5)},
          .attrs = {{"reduction", reduction}},
          .reference = [reduction](const Inputs& in) {
            std::vector<double> t = values_of(in[1]), g = values_of(in[2]), out(12, 0.0);
            for (int i = 0; i < 3; ++i) {
              double gi = reduction == "none" ? g[i] : reduction == "mean" ? g[0] / 3 : g[0];
              out[i * 4 + static_cast<int>(t[i])] = -gi;
            }
            return std::vector{result(out, Shape{3, 4}, in[0].dtype())};
          }};
}

OpTestCase mse_row(std::string name, std::string reduction, Shape shape) {
  return {.name = std::move(name),
          .op = "mse",
          .inputs = {random_tensor(shape, 17), random_tensor(shape, 18)},
          .attrs = {{"reduction", reduction}},
          .reference = [reduction](const Inputs& in) {
            std::vector<double> a = values_of(in[0]), b = values_of(in[1]), sq;
            for (size_t i = 0; i < a.size(); ++i) sq.push_back((a[i] - b[i]) * (a[i] - b[i]));
            if (reduction == "none") return std::vector{result(sq, in[0].shape(), in[0].dtype())};
            return std::vector{reduce(sq, reduction, in[0].dtype())};
          }};
}

TANDEM_OP_TEST_ROWS(softmax_loss) {
  std::vector<OpTestCase> rows;
  for (const char* op : {"softmax", "log_softmax"}) {
    add_both(rows, softmax_row(op, "last_axis", random_tensor({3, 5}, 1, -3, 3), -1));
    add_both(rows, softmax_row(op, "first_axis", random_tensor({4, 3}, 2, -3, 3), 0));
    add_both(rows, softmax_row(op, "middle_axis", random_tensor({2, 3, 4}, 3, -3, 3), 1));
    add_both(rows, softmax_row(op, "vector", random_tensor({6}, 4, -3, 3), 0));
    // Logits near 1000 overflow exp() unless the max is subtracted first.
    add_both(rows, softmax_row(op, "large_logits", random_tensor({2, 4}, 5, 995, 1005), -1));
    add_both(rows, softmax_row(op, "large_f32_rows", random_tensor({64, 100}, 6, -10, 10), -1));
    rows[rows.size() - 2].check_gradient = false;  // Large: forward only.
  }
  for (auto [name, reduction, smoothing] :
       {std::tuple{"mean", "mean", 0.0}, std::tuple{"sum", "sum", 0.0},
        std::tuple{"none", "none", 0.0}, std::tuple{"smoothed_mean", "mean", 0.1},
        std::tuple{"smoothed_none", "none", 0.25}}) {
    add_both(rows, cross_entropy_row(name, reduction, smoothing));
    add_both(rows, cross_entropy_backward_row(name, reduction, smoothing), 1e-5);
  }
  for (const char* reduction : {"mean", "sum", "none"}) {
    add_both(rows, nll_row(reduction, reduction));
    add_both(rows, nll_backward_row(reduction, reduction));
    add_both(rows, mse_row(reduction, reduction, {2, 3}));
  }
  add_both(rows, mse_row("mean_3d", "mean", {2, 2, 3}));
  return rows;
}

// Verifies that an out-of-range target fails the op at run time, and reading
// the loss throws an error naming cross_entropy, the sample and the classes.
TEST(CrossEntropyTest, TargetOutOfRangeThrowsWhenRead) {
  Tensor logits = random_tensor({3, 5}, 1);
  for (double bad : {7.0, -1.0}) {
    Tensor loss = call1("cross_entropy", {logits, targets({0, 1, bad})});
    std::string message = error_of([&] { loss.to_vector<double>(); });
    EXPECT_THAT(message, HasSubstr("cross_entropy"));
    EXPECT_THAT(message,
                HasSubstr("of sample 2 is out of range for 5 classes (input of shape [3, 5])"));
  }
  Tensor loss = call1("nll", {logits, targets({5, 0, 0})});
  EXPECT_THAT(error_of([&] { loss.to_vector<double>(); }),
              HasSubstr("nll: target 5 of sample 0 is out of range for 5 classes"));
}

// Verifies that shapes, dtypes and attributes are checked at the call.
TEST(CrossEntropyTest, BadArgumentsAreNamed) {
  Tensor logits = random_tensor({3, 5}, 1);
  EXPECT_THAT(error_of([&] {
                call("cross_entropy", {logits, targets({0, 1})});
              }),
              HasSubstr("target must be [3] for logits of shape [3, 5], got [2]"));
  EXPECT_THAT(error_of([&] {
                call("cross_entropy", {logits, random_tensor({3}, 2)});
              }),
              HasSubstr("target must be int64 class indices, got float64"));
  EXPECT_THAT(error_of([&] {
                call("cross_entropy", {random_tensor({5}, 1), targets({0})});
              }),
              HasSubstr("logits must be [batch, classes]"));
  EXPECT_THAT(error_of([&] {
                call("cross_entropy", {logits, targets({0, 1, 2})}, {{"label_smoothing", 1.0}});
              }),
              HasSubstr("label_smoothing must be in [0, 1), got 1"));
  EXPECT_THAT(
      error_of([&] {
        call("cross_entropy", {logits, targets({0, 1, 2})}, {{"reduction", std::string("avg")}});
      }),
      HasSubstr("reduction must be \"mean\", \"sum\" or \"none\", got \"avg\""));
}

// Verifies softmax's axis check and mse's shape check.
TEST(SoftmaxTest, BadAxisAndShapesAreNamed) {
  EXPECT_THROW(call("softmax", {random_tensor({2, 3}, 1)}, {{"axis", int64_t{2}}}), Error);
  EXPECT_THAT(error_of([&] { call("softmax", {random_tensor({}, 1)}); }),
              HasSubstr("at least one axis"));
  EXPECT_THAT(error_of([&] {
                call("mse", {random_tensor({2, 3}, 1), random_tensor({3}, 2)});
              }),
              HasSubstr("input and target must have the same shape and dtype"));
}

// Verifies that float32 softmax stays finite for huge logits.
TEST(SoftmaxTest, Float32HugeLogitsStayFinite) {
  Tensor x = tensor_of({1e30, 0, -1e30, 88, 89, 90}, {2, 3}, DType::kFloat32);
  for (float v : call1("softmax", {x}).to_vector<float>()) EXPECT_TRUE(std::isfinite(v));
  for (float v : call1("log_softmax", {x}).to_vector<float>()) EXPECT_FALSE(std::isnan(v));
}

}  // namespace
}  // namespace tandem::kernels::testing
