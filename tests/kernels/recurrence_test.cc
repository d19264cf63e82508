// Rows for recurrence.cc (rnn_tanh, rnn_relu, lstm, gru and their
// backwards) and its error messages. The forward reference steps through
// the sequence one sample at a time in double, from torch's equations; the
// backward reference is the central difference of that forward along every
// input element, weighted by the rows' output gradients: independent of the
// kernels' backward through time.
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

enum class Cell { kRnnTanh, kRnnRelu, kLstm, kGru };

struct Call {
  Cell cell = Cell::kLstm;
  bool reverse = false;
  bool initial_h = false;
  bool initial_c = false;  // LSTM only.

  const char* op() const {
    switch (cell) {
      case Cell::kRnnTanh:
        return "rnn_tanh";
      case Cell::kRnnRelu:
        return "rnn_relu";
      case Cell::kLstm:
        return "lstm";
      case Cell::kGru:
        return "gru";
    }
    return "";
  }
  std::string backward_op() const { return std::string(op()) + "_backward"; }
  int64_t gates() const { return cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1; }
  int states() const { return cell == Cell::kLstm ? 2 : 1; }
  bool saves() const { return cell == Cell::kLstm || cell == Cell::kGru; }
  Attrs attrs() const {
    Attrs a = {{"reverse", reverse}, {"initial_h", initial_h}};
    if (cell == Cell::kLstm) a.set("initial_c", initial_c);
    return a;
  }
};

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// The forward's outputs from (projected, weight_hh, bias_hh[, h0][, c0]) as
// host values: output, the final states, and what the cell saves (lstm: c_t
// and the gates; gru: R_n + b_hn and the gates).
std::vector<std::vector<double>> recurrence_values(const std::vector<std::vector<double>>& in,
                                                   int64_t batch, int64_t steps, int64_t hidden,
                                                   const Call& call) {
  const std::vector<double>&p = in[0], &w = in[1], &bias = in[2];
  const std::vector<double>* h0 = call.initial_h ? &in[3] : nullptr;
  const std::vector<double>* c0 = call.initial_c ? &in[call.initial_h ? 4 : 3] : nullptr;
  const int64_t n = hidden, width = call.gates() * hidden;
  std::vector<double> y(batch * steps * n), saved(y.size()), gates(batch * steps * width);
  std::vector<double> h_n(batch * n), c_n(batch * n);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<double> h(n), c(n);
    for (int64_t j = 0; j < n; ++j) {
      h[j] = h0 ? (*h0)[b * n + j] : 0;
      c[j] = c0 ? (*c0)[b * n + j] : 0;
    }
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t t = call.reverse ? steps - 1 - s : s;
      const double* pt = &p[(b * steps + t) * width];
      double* gt = &gates[(b * steps + t) * width];
      std::vector<double> r(width);  // h W_hh^T + b_hh
      for (int64_t k = 0; k < width; ++k) {
        r[k] = bias[k];
        for (int64_t j = 0; j < n; ++j) r[k] += h[j] * w[k * n + j];
      }
      std::vector<double> next(n);
      for (int64_t j = 0; j < n; ++j) {
        switch (call.cell) {
          case Cell::kRnnTanh:
            next[j] = std::tanh(pt[j] + r[j]);
            break;
          case Cell::kRnnRelu:
            next[j] = std::max(0.0, pt[j] + r[j]);
            break;
          case Cell::kLstm: {
            const double i = sigmoid(pt[j] + r[j]), f = sigmoid(pt[n + j] + r[n + j]);
            const double g = std::tanh(pt[2 * n + j] + r[2 * n + j]);
            const double o = sigmoid(pt[3 * n + j] + r[3 * n + j]);
            c[j] = f * c[j] + i * g;
            next[j] = o * std::tanh(c[j]);
            gt[j] = i, gt[n + j] = f, gt[2 * n + j] = g, gt[3 * n + j] = o;
            saved[(b * steps + t) * n + j] = c[j];
            break;
          }
          case Cell::kGru: {
            const double reset = sigmoid(pt[j] + r[j]), update = sigmoid(pt[n + j] + r[n + j]);
            const double candidate = std::tanh(pt[2 * n + j] + reset * r[2 * n + j]);
            next[j] = (1 - update) * candidate + update * h[j];
            gt[j] = reset, gt[n + j] = update, gt[2 * n + j] = candidate;
            saved[(b * steps + t) * n + j] = r[2 * n + j];
            break;
          }
        }
      }
      h = next;
      for (int64_t j = 0; j < n; ++j) y[(b * steps + t) * n + j] = h[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      h_n[b * n + j] = h[j];
      c_n[b * n + j] = c[j];
    }
  }
  std::vector<std::vector<double>> out = {y, h_n};
  if (call.states() == 2) out.push_back(c_n);
  if (call.saves()) {
    out.push_back(saved);
    out.push_back(gates);
  }
  return out;
}

struct Sizes {
  int64_t batch, steps, hidden;
  Sizes(const Shape& projected, const Call& call)
      : batch(projected[0]), steps(projected[1]), hidden(projected[2] / call.gates()) {}
};

std::vector<Tensor> recurrence_reference(const Inputs& in, const Call& call) {
  const Sizes z(in[0].shape(), call);
  std::vector<std::vector<double>> values;
  for (const Tensor& t : in) values.push_back(values_of(t));
  std::vector<std::vector<double>> out =
      recurrence_values(values, z.batch, z.steps, z.hidden, call);
  const DType dtype = in[0].dtype();
  const Shape sequence{z.batch, z.steps, z.hidden}, state{z.batch, z.hidden};
  std::vector<Tensor> results = {result(out[0], sequence, dtype)};
  for (int k = 0; k < call.states(); ++k) results.push_back(result(out[1 + k], state, dtype));
  if (call.saves()) {
    results.push_back(result(out[1 + call.states()], sequence, dtype));
    results.push_back(result(out[2 + call.states()], in[0].shape(), dtype));
  }
  return results;
}

// The backward's inputs for forward inputs `forward`: the forward's own
// outputs and random gradients of output and the final states.
Inputs backward_inputs(const Inputs& forward, const Call& call, uint64_t seed) {
  std::vector<Tensor> out = recurrence_reference(forward, call);
  Inputs in = {forward[1], out[0]};
  for (size_t k = 1 + call.states(); k < out.size(); ++k) in.push_back(out[k]);
  for (int k = 0; k <= call.states(); ++k) in.push_back(random_tensor(out[k].shape(), seed + k));
  for (size_t k = 3; k < forward.size(); ++k) in.push_back(forward[k]);
  return in;
}

// The gradients of <output, g_y> + <h_n, g_h> (+ <c_n, g_c>) with respect
// to each forward input, by central differences of recurrence_values.
// `forward` holds the forward's inputs; `backward` the backward row's.
std::vector<Tensor> backward_reference(const Inputs& forward, const Inputs& backward,
                                       const Call& call) {
  const Sizes z(forward[0].shape(), call);
  std::vector<std::vector<double>> x;
  for (const Tensor& t : forward) x.push_back(values_of(t));
  const size_t first_grad = call.saves() ? 4 : 2;
  std::vector<std::vector<double>> g;
  for (int k = 0; k <= call.states(); ++k) g.push_back(values_of(backward[first_grad + k]));
  const auto loss = [&]() {
    std::vector<std::vector<double>> out = recurrence_values(x, z.batch, z.steps, z.hidden, call);
    double sum = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      for (size_t e = 0; e < g[k].size(); ++e) sum += out[k][e] * g[k][e];
    }
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
Inputs recurrence_inputs(int64_t batch, int64_t steps, int64_t hidden, const Call& call,
                         uint64_t seed) {
  const int64_t width = call.gates() * hidden;
  Inputs in = {random_tensor({batch, steps, width}, seed), random_tensor({width, hidden}, seed + 1),
               random_tensor({width}, seed + 2)};
  if (call.initial_h) in.push_back(random_tensor({batch, hidden}, seed + 3));
  if (call.initial_c) in.push_back(random_tensor({batch, hidden}, seed + 4));
  return in;
}

TANDEM_OP_TEST_ROWS(recurrence) {
  std::vector<OpTestCase> rows;
  const struct {
    const char* name;
    Call call;
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
  for (Cell cell : {Cell::kRnnTanh, Cell::kRnnRelu, Cell::kLstm, Cell::kGru}) {
    for (const auto& c : cases) {
      Call call = c.call;
      call.cell = cell;
      if (cell != Cell::kLstm && call.initial_c) {
        if (!call.initial_h) continue;  // only_c0 is LSTM's.
        call.initial_c = false;
      }
      const Inputs forward = recurrence_inputs(c.batch, c.steps, c.hidden, call, seed += 10);
      add_both(rows,
               {.name = c.name,
                .op = call.op(),
                .inputs = forward,
                .attrs = call.attrs(),
                .reference = [call](const Inputs& in) { return recurrence_reference(in, call); }});
      add_both(rows, {.name = c.name,
                      .op = call.backward_op(),
                      .inputs = backward_inputs(forward, call, seed + 5),
                      .attrs = call.attrs(),
                      .reference =
                          [forward, call](const Inputs& in) {
                            return backward_reference(forward, in, call);
                          },
                      .check_gradient = false});
    }
    // No steps: the final states are the initial ones.
    const Call empty{.cell = cell, .initial_h = true, .initial_c = cell == Cell::kLstm};
    rows.push_back(
        {.name = "no_steps",
         .op = empty.op(),
         .inputs = recurrence_inputs(2, 0, 3, empty, 90),
         .attrs = empty.attrs(),
         .reference = [empty](const Inputs& in) { return recurrence_reference(in, empty); },
         .check_gradient = false});
  }
  return rows;
}

std::string error_for(const char* op, Inputs inputs, Attrs attrs = {}) {
  return error_of([&] { call(op, inputs, attrs); });
}

TEST(RecurrenceOpTest, NamesWhatDoesNotFit) {
  EXPECT_THAT(error_for("lstm", {random_tensor({2, 3, 6}, 1), random_tensor({8, 2}, 2),
                                 random_tensor({8}, 3)}),
              HasSubstr("projected must be [batch, seq, 4 * hidden], got [2, 3, 6]"));
  EXPECT_THAT(error_for("lstm", {random_tensor({2, 3, 8}, 1), random_tensor({8, 3}, 2),
                                 random_tensor({8}, 3)}),
              HasSubstr("weight_hh must be [4 * hidden, hidden] = [8, 2]"));
  EXPECT_THAT(error_for("gru", {random_tensor({2, 3, 6}, 1), random_tensor({6, 2}, 2),
                                random_tensor({8}, 3)}),
              HasSubstr("bias_hh must be [6], got [8]"));
  EXPECT_THAT(error_for("rnn_tanh", {random_tensor({2, 3, 4}, 1), random_tensor({4, 2}, 2),
                                     random_tensor({4}, 3)}),
              HasSubstr("weight_hh must be [hidden, hidden] = [4, 4]"));
  EXPECT_THAT(
      error_for("lstm",
                {random_tensor({2, 3, 8}, 1), random_tensor({8, 2}, 2), random_tensor({8}, 3)},
                {{"initial_h", true}}),
      HasSubstr("takes projected, weight_hh, bias_hh and 1 initial states"));
  EXPECT_THAT(error_for("gru",
                        {random_tensor({2, 3, 6}, 1), random_tensor({6, 2}, 2),
                         random_tensor({6}, 3), random_tensor({3, 2}, 4)},
                        {{"initial_h", true}}),
              HasSubstr("an initial state must be float64 [batch, hidden] = [2, 2], got float64 "
                        "[3, 2]"));
  // A hidden size of 0: empty outputs, no error (nothing divides by it).
  const std::vector<Tensor> empty = call(
      "gru", {random_tensor({2, 3, 0}, 1), random_tensor({0, 0}, 2), random_tensor({0}, 3)}, {});
  EXPECT_EQ(empty[0].shape(), Shape({2, 3, 0}));
  EXPECT_EQ(empty[1].shape(), Shape({2, 0}));
  EXPECT_THAT(error_for("gru_backward",
                        {tensor_of({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {6, 2}, DType::kFloat32),
                         random_tensor({2, 3, 2}, 2), random_tensor({2, 3, 2}, 3),
                         random_tensor({2, 3, 6}, 4), random_tensor({2, 3, 2}, 5),
                         random_tensor({2, 2}, 6)}),
              HasSubstr("weight_hh must be float64 as output is, got float32"));
  EXPECT_THAT(error_for("gru_backward", {random_tensor({6, 2}, 1), random_tensor({2, 3, 2}, 2),
                                         random_tensor({2, 3, 2}, 3), random_tensor({2, 3, 5}, 4),
                                         random_tensor({2, 3, 2}, 5), random_tensor({2, 2}, 6)}),
              HasSubstr("gates must be float64 [2, 3, 6], got float64 [2, 3, 5]"));
}

}  // namespace
}  // namespace tandem::kernels::testing
