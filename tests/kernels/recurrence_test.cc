// Rows for recurrence.cc (lstm, lstm_backward) and its error messages. The
// forward reference steps through the sequence one (sample, unit) at a time
// in double, from torch's equations; the backward reference is the central
// difference of that forward along every input element, weighted by the
// rows' output gradients: independent of the kernels' backward through time.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"

namespace tandem::kernels::testing {
namespace {

using ::testing::HasSubstr;

struct Lstm {
  bool reverse = false;
  bool initial_h = false;
  bool initial_c = false;
  Attrs attrs() const {
    return {{"reverse", reverse}, {"initial_h", initial_h}, {"initial_c", initial_c}};
  }
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// Outputs (output, h_n, c_n, cells, gates) of lstm from
// (projected, weight_hh, bias_hh[, h0][, c0]) as host values.
std::vector<std::vector<double>> lstm_values(const std::vector<std::vector<double>>& in,
                                             int64_t batch, int64_t steps, int64_t hidden,
                                             const Lstm& call) {
  const std::vector<double>&p = in[0], &w = in[1], &bias = in[2];
  const std::vector<double>* h0 = call.initial_h ? &in[3] : nullptr;
  const std::vector<double>* c0 = call.initial_c ? &in[call.initial_h ? 4 : 3] : nullptr;
  const int64_t width = 4 * hidden;
  std::vector<double> y(batch * steps * hidden), cells(y.size()), gates(p.size());
  std::vector<double> h_n(batch * hidden), c_n(batch * hidden);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> h(hidden), c(hidden);
    for (int64_t j = 0; j < hidden; ++j) {
      h[j] = h0 ? (*h0)[b * hidden + j] : 0;
      c[j] = c0 ? (*c0)[b * hidden + j] : 0;
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = call.reverse ? steps - 1 - s : s;
      std::vector<double> pre(width);
      for (int64_t k = 0; k < width; ++k) {
        pre[k] = p[(b * steps + t) * width + k] + bias[k];
        for (int64_t j = 0; j < hidden; ++j) pre[k] += h[j] * w[k * hidden + j];
      }
      for (int64_t j = 0; j < hidden; ++j) {
        const double i = sigmoid(pre[j]), f = sigmoid(pre[hidden + j]);
        const double g = std::tanh(pre[2 * hidden + j]), o = sigmoid(pre[3 * hidden + j]);
        c[j] = f * c[j] + i * g;
        const double* activated[] = {&i, &f, &g, &o};
        for (int q = 0; q < 4; ++q) {
          gates[(b * steps + t) * width + q * hidden + j] = *activated[q];
        }
        cells[(b * steps + t) * hidden + j] = c[j];
      }
      for (int64_t j = 0; j < hidden; ++j) {
        h[j] = sigmoid(pre[3 * hidden + j]) * std::tanh(c[j]);
        y[(b * steps + t) * hidden + j] = h[j];
      }
    }
    for (int64_t j = 0; j < hidden; ++j) {
      h_n[b * hidden + j] = h[j];
      c_n[b * hidden + j] = c[j];
    }
  }
  return {y, h_n, c_n, cells, gates};
}

struct LstmShapes {
  int64_t batch, steps, hidden;
  explicit LstmShapes(const Shape& projected)
      : batch(projected[0]), steps(projected[1]), hidden(projected[2] / 4) {}
};

std::vector<Tensor> lstm_reference(const Inputs& in, const Lstm& call) {
  const LstmShapes z(in[0].shape());
  std::vector<std::vector<double>> values;
  for (const Tensor& t : in) values.push_back(values_of(t));
  std::vector<std::vector<double>> out = lstm_values(values, z.batch, z.steps, z.hidden, call);
  const DType dtype = in[0].dtype();
  const Shape sequence{z.batch, z.steps, z.hidden}, state{z.batch, z.hidden};
  return {result(out[0], sequence, dtype), result(out[1], state, dtype),
          result(out[2], state, dtype), result(out[3], sequence, dtype),
          result(out[4], in[0].shape(), dtype)};
}

// lstm_backward's inputs for forward inputs `forward`: the forward's own
// outputs and random gradients of output, h_n and c_n.
Inputs backward_inputs(const Inputs& forward, const Lstm& call, uint64_t seed) {
  std::vector<Tensor> out = lstm_reference(forward, call);
  Inputs in = {forward[1],
               out[0],
               out[3],
               out[4],
               random_tensor(out[0].shape(), seed),
               random_tensor(out[1].shape(), seed + 1),
               random_tensor(out[2].shape(), seed + 2)};
  for (size_t k = 3; k < forward.size(); ++k) in.push_back(forward[k]);
  return in;
}

// The gradients of <output, g_y> + <h_n, g_h> + <c_n, g_c> with respect to
// each forward input, by central differences of lstm_values. `forward` holds
// the forward's inputs; `backward` the backward row's.
std::vector<Tensor> lstm_backward_reference(const Inputs& forward, const Inputs& backward,
                                            const Lstm& call) {
  const LstmShapes z(forward[0].shape());
  std::vector<std::vector<double>> x;
  for (const Tensor& t : forward) x.push_back(values_of(t));
  const std::vector<double> g_y = values_of(backward[4]), g_h = values_of(backward[5]),
                            g_c = values_of(backward[6]);
  const auto loss = [&]() {
    std::vector<std::vector<double>> out = lstm_values(x, z.batch, z.steps, z.hidden, call);
    double sum = 0;
    for (size_t e = 0; e < g_y.size(); ++e) sum += out[0][e] * g_y[e];
    for (size_t e = 0; e < g_h.size(); ++e) sum += out[1][e] * g_h[e] + out[2][e] * g_c[e];
    return sum;
  };
  std::vector<Tensor> grads;
  for (size_t k = 0; k < x.size(); ++k) {
    std::vector<double> d(x[k].size());
    for (size_t e = 0; e < d.size(); ++e) {
      const double keep = x[k][e], h = 1e-6;
      x[k][e] = keep + h;
      const double up = loss();
      x[k][e] = keep - h;
      d[e] = (up - loss()) / (2 * h);
      x[k][e] = keep;
    }
    grads.push_back(result(d, forward[k].shape(), backward[0].dtype()));
  }
  return grads;
}

// (projected, weight_hh, bias_hh[, h0][, c0]) for [batch, steps] and `hidden`.
Inputs lstm_inputs(int64_t batch, int64_t steps, int64_t hidden, const Lstm& call, uint64_t seed) {
  Inputs in = {random_tensor({batch, steps, 4 * hidden}, seed),
               random_tensor({4 * hidden, hidden}, seed + 1),
               random_tensor({4 * hidden}, seed + 2)};
  if (call.initial_h) in.push_back(random_tensor({batch, hidden}, seed + 3));
  if (call.initial_c) in.push_back(random_tensor({batch, hidden}, seed + 4));
  return in;
}

TANDEM_OP_TEST_ROWS(recurrence) {
  std::vector<OpTestCase> rows;
  const struct {
    const char* name;
    Lstm call;
    int64_t batch, steps, hidden;
  } cases[] = {
      {"zero_state", {}, 2, 4, 3},
      {"initial_states", {.initial_h = true, .initial_c = true}, 2, 3, 2},
      {"reverse_initial_states", {.reverse = true, .initial_h = true, .initial_c = true}, 3, 4, 2},
      {"only_h0_reverse", {.reverse = true, .initial_h = true}, 2, 3, 3},
      {"only_c0", {.initial_c = true}, 1, 5, 2},
      {"one_step", {.initial_h = true}, 2, 1, 4},
  };
  uint64_t seed = 1;
  for (const auto& c : cases) {
    const Inputs forward = lstm_inputs(c.batch, c.steps, c.hidden, c.call, seed += 10);
    const Lstm call = c.call;
    add_both(rows, {.name = c.name,
                    .op = "lstm",
                    .inputs = forward,
                    .attrs = call.attrs(),
                    .reference = [call](const Inputs& in) { return lstm_reference(in, call); }});
    add_both(rows, {.name = c.name,
                    .op = "lstm_backward",
                    .inputs = backward_inputs(forward, call, seed + 5),
                    .attrs = call.attrs(),
                    .reference =
                        [forward, call](const Inputs& in) {
                          return lstm_backward_reference(forward, in, call);
                        },
                    .check_gradient = false});
  }
  // No steps: the final states are the initial ones.
  const Lstm empty{.initial_h = true, .initial_c = true};
  rows.push_back({.name = "no_steps",
                  .op = "lstm",
                  .inputs = lstm_inputs(2, 0, 3, empty, 90),
                  .attrs = empty.attrs(),
                  .reference = [empty](const Inputs& in) { return lstm_reference(in, empty); },
                  .check_gradient = false});
  return rows;
}

std::string lstm_error(Inputs inputs, Lstm lstm = {}) {
  return error_of([&] { call("lstm", inputs, lstm.attrs()); });
}

TEST(LstmOpTest, NamesWhatDoesNotFit) {
  EXPECT_THAT(
      lstm_error({random_tensor({2, 3, 6}, 1), random_tensor({8, 2}, 2), random_tensor({8}, 3)}),
      HasSubstr("projected must be [batch, seq, 4 * hidden], got [2, 3, 6]"));
  EXPECT_THAT(
      lstm_error({random_tensor({2, 3, 8}, 1), random_tensor({8, 3}, 2), random_tensor({8}, 3)}),
      HasSubstr("weight_hh must be [4 * hidden, hidden] = [8, 2]"));
  EXPECT_THAT(
      lstm_error({random_tensor({2, 3, 8}, 1), random_tensor({8, 2}, 2), random_tensor({8}, 3)},
                 {.initial_h = true}),
      HasSubstr("takes projected, weight_hh, bias_hh and 1 initial states"));
  EXPECT_THAT(lstm_error({random_tensor({2, 3, 8}, 1), random_tensor({8, 2}, 2),
                          random_tensor({8}, 3), random_tensor({3, 2}, 4)},
                         {.initial_c = true}),
              HasSubstr("an initial state must be float64 [batch, hidden] = [2, 2], got float64 "
                        "[3, 2]"));
}

}  // namespace
}  // namespace tandem::kernels::testing
