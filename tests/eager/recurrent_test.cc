// Recurrent layers (eager/nn/recurrent.h): RNN, LSTM and GRU against plain
// float64 loops over the modules' own parameters (torch's equations), for
// several layers, both directions, given and zero initial states and both
// layouts; gradients against central differences; and every mode (eager,
// hybridized, exported then loaded) at the traced batch size and another.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
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

using testing::error_of;
using testing::expect_near;
using ::testing::HasSubstr;
using testing::Values;
using testing::values_of;

double sigmoid_of(double v) { return 1 / (1 + std::exp(-v)); }

struct LoopResult {
  Values output, h, c;  // As RecurrentResult, batch first.
};

// torch's equations, step by step, from the module's parameters by name.
// x is [batch, seq, input] (batch first); h0, c0 empty for zeros.
LoopResult recurrent_loop(const nn::Recurrent& m, const Values& x, int64_t batch, int64_t length,
                          const Values& h0 = {}, const Values& c0 = {}) {
  const nn::RecurrentOptions& o = m.options();
  std::map<std::string, Values> p;
  for (const auto& [name, t] : m.named_parameters()) p[name] = values_of(t);
  const int64_t hidden = o.hidden_size, directions = o.bidirectional ? 2 : 1;
  const int64_t gates = m.kind() == nn::RecurrentKind::kLstm  ? 4
                        : m.kind() == nn::RecurrentKind::kGru ? 3
                                                              : 1;
  const int64_t states = o.num_layers * directions;
  LoopResult r;
  r.h.assign(states * batch * hidden, 0);
  r.c.assign(states * batch * hidden, 0);
  Values input = x;
  int64_t in = o.input_size;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    Values out(batch * length * directions * hidden);
    for (int64_t d = 0; d < directions; ++d) {
      const std::string sfx = str_cat("_l", layer, d ? "_reverse" : "");
      const Values &wih = p["weight_ih" + sfx], &whh = p["weight_hh" + sfx];
      Values bih(gates * hidden, 0), bhh(gates * hidden, 0);
      if (o.bias) bih = p["bias_ih" + sfx], bhh = p["bias_hh" + sfx];
      const int64_t s = layer * directions + d;
      for (int64_t b = 0; b < batch; ++b) {
        Values h(hidden, 0), c(hidden, 0);
        for (int64_t j = 0; j < hidden; ++j) {
          if (!h0.empty()) h[j] = h0[(s * batch + b) * hidden + j];
          if (!c0.empty()) c[j] = c0[(s * batch + b) * hidden + j];
        }
        for (int64_t i = 0; i < length; ++i) {
          const int64_t t = d ? length - 1 - i : i;
          Values gx(gates * hidden), gh(gates * hidden);
          for (int64_t g = 0; g < gates * hidden; ++g) {
            gx[g] = bih[g], gh[g] = bhh[g];
            for (int64_t k = 0; k < in; ++k)
              gx[g] += wih[g * in + k] * input[(b * length + t) * in + k];
            for (int64_t k = 0; k < hidden; ++k) gh[g] += whh[g * hidden + k] * h[k];
          }
          Values next(hidden);
          for (int64_t j = 0; j < hidden; ++j) {
            switch (m.kind()) {
              case nn::RecurrentKind::kRnnTanh:
                next[j] = std::tanh(gx[j] + gh[j]);
                break;
              case nn::RecurrentKind::kRnnRelu:
                next[j] = std::max(0.0, gx[j] + gh[j]);
                break;
              case nn::RecurrentKind::kLstm: {
                const auto gate = [&](int64_t q) {
                  return gx[q * hidden + j] + gh[q * hidden + j];
                };
                c[j] = sigmoid_of(gate(1)) * c[j] + sigmoid_of(gate(0)) * std::tanh(gate(2));
                next[j] = sigmoid_of(gate(3)) * std::tanh(c[j]);
                break;
              }
              case nn::RecurrentKind::kGru: {
                const double reset = sigmoid_of(gx[j] + gh[j]);
                const double update = sigmoid_of(gx[hidden + j] + gh[hidden + j]);
                const double n = std::tanh(gx[2 * hidden + j] + reset * gh[2 * hidden + j]);
                next[j] = (1 - update) * n + update * h[j];
                break;
              }
            }
          }
          h = next;
          for (int64_t j = 0; j < hidden; ++j) {
            out[((b * length + t) * directions + d) * hidden + j] = h[j];
          }
        }
        for (int64_t j = 0; j < hidden; ++j) {
          r.h[(s * batch + b) * hidden + j] = h[j];
          r.c[(s * batch + b) * hidden + j] = c[j];
        }
      }
    }
    input = out;
    in = directions * hidden;
  }
  r.output = input;
  return r;
}

constexpr nn::RecurrentKind kKinds[] = {nn::RecurrentKind::kRnnTanh, nn::RecurrentKind::kRnnRelu,
                                        nn::RecurrentKind::kLstm, nn::RecurrentKind::kGru};

std::string kind_name(nn::RecurrentKind kind) {
  return nn::Recurrent(kind, {.input_size = 1, .hidden_size = 1}).type_name() +
         (kind == nn::RecurrentKind::kRnnRelu ? "(relu)" : "");
}

TEST(Recurrent, MatchesTheLoop) {
  for (nn::RecurrentKind kind : kKinds) {
    for (bool bidirectional : {false, true}) {
      for (bool bias : {true, false}) {
        SCOPED_TRACE(str_cat(kind_name(kind), " bidirectional ", bidirectional, " bias ", bias));
        manual_seed(11);
        nn::Recurrent m(kind, {.input_size = 3,
                               .hidden_size = 4,
                               .num_layers = 2,
                               .bias = bias,
                               .bidirectional = bidirectional,
                               .dtype = DType::kFloat64});
        Tensor x = randn({2, 5, 3}, DType::kFloat64);
        const int64_t states = bidirectional ? 4 : 2;
        Tensor h0 = randn({states, 2, 4}, DType::kFloat64);
        Tensor c0 = randn({states, 2, 4}, DType::kFloat64);
        // Zero states, through forward(x).
        LoopResult zero = recurrent_loop(m, values_of(x), 2, 5);
        expect_near(values_of(m(x)), zero.output, 1e-12);
        // Given states.
        const bool lstm = kind == nn::RecurrentKind::kLstm;
        LoopResult given =
            recurrent_loop(m, values_of(x), 2, 5, values_of(h0), lstm ? values_of(c0) : Values{});
        nn::RecurrentResult r = m.forward(x, h0, lstm ? c0 : Tensor());
        EXPECT_EQ(r.output.shape(), Shape({2, 5, bidirectional ? 8 : 4}));
        expect_near(values_of(r.output), given.output, 1e-12);
        expect_near(values_of(r.h), given.h, 1e-12);
        if (lstm) expect_near(values_of(r.c), given.c, 1e-12);
        EXPECT_EQ(r.c.defined(), lstm);
      }
    }
  }
}

TEST(Recurrent, SequenceFirstIsTheTransposedLayout) {
  manual_seed(12);
  nn::LSTM first({.input_size = 3, .hidden_size = 4, .dtype = DType::kFloat64});
  nn::LSTM seq_first(
      {.input_size = 3, .hidden_size = 4, .batch_first = false, .dtype = DType::kFloat64});
  seq_first.load_state_dict(first.state_dict());
  Tensor x = randn({2, 5, 3}, DType::kFloat64);
  expect_near(values_of(transpose(seq_first(transpose(x, {1, 0, 2})), {1, 0, 2})),
              values_of(first(x)), 1e-12);
}

TEST(Recurrent, HasTorchsParameters) {
  nn::LSTM lstm({.input_size = 3, .hidden_size = 5, .num_layers = 2, .bidirectional = true});
  std::vector<std::string> names;
  for (const auto& [name, t] : lstm.named_parameters())
    names.push_back(name + t.shape().to_string());
  EXPECT_THAT(names,
              ::testing::ElementsAre("weight_ih_l0[20, 3]", "weight_hh_l0[20, 5]", "bias_ih_l0[20]",
                                     "bias_hh_l0[20]", "weight_ih_l0_reverse[20, 3]",
                                     "weight_hh_l0_reverse[20, 5]", "bias_ih_l0_reverse[20]",
                                     "bias_hh_l0_reverse[20]", "weight_ih_l1[20, 10]",
                                     "weight_hh_l1[20, 5]", "bias_ih_l1[20]", "bias_hh_l1[20]",
                                     "weight_ih_l1_reverse[20, 10]", "weight_hh_l1_reverse[20, 5]",
                                     "bias_ih_l1_reverse[20]", "bias_hh_l1_reverse[20]"));
  for (const Tensor& p : lstm.parameters()) {
    EXPECT_LE(max(abs(p)).item<float>(), 1 / std::sqrt(5.0f) + 1e-6f);
  }
  EXPECT_EQ(nn::GRU({.input_size = 2, .hidden_size = 3}).named_parameters()[0].second.shape(),
            Shape({9, 2}));
}

TEST(Recurrent, RefusesWhatDoesNotFit) {
  nn::GRU gru({.input_size = 3, .hidden_size = 4, .num_layers = 2});
  EXPECT_THAT(error_of([&] {
                gru(randn({2, 5, 4}));
              }),
              HasSubstr("GRU(input_size=3) expects input of shape [batch, seq, 3]"));
  EXPECT_THAT(error_of([&] { gru(randn({2, 0, 3})); }), HasSubstr("non-empty sequence"));
  EXPECT_THAT(error_of([&] {
                gru.forward(randn({2, 5, 3}), zeros({1, 2, 4}));
              }),
              HasSubstr("h0 must be [2, 2, 4]"));
  EXPECT_THAT(error_of([&] {
                gru.forward(randn({2, 5, 3}), {}, zeros({2, 2, 4}));
              }),
              HasSubstr("c0 is for LSTM"));
  EXPECT_THAT(error_of([] { nn::LSTM({.input_size = 3, .hidden_size = 0}); }),
              HasSubstr("positive input_size and hidden_size"));
}

TEST(Recurrent, GradientsMatchCentralDifferences) {
  for (nn::RecurrentKind kind : {nn::RecurrentKind::kLstm, nn::RecurrentKind::kGru}) {
    SCOPED_TRACE(kind_name(kind));
    manual_seed(13);
    nn::Recurrent m(
        kind, {.input_size = 2, .hidden_size = 3, .bidirectional = true, .dtype = DType::kFloat64});
    Tensor x = randn({2, 3, 2}, DType::kFloat64);
    Tensor h0 = randn({2, 2, 3}, DType::kFloat64);
    Tensor cotangent = randn({2, 3, 6}, DType::kFloat64);
    const auto objective = [&](const Tensor& input, const Tensor& state) {
      return sum(mul(m.forward(input, state).output, cotangent));
    };
    Tensor leaf_x = add(x, 0.0).requires_grad_(), leaf_h = add(h0, 0.0).requires_grad_();
    m.zero_grad();
    objective(leaf_x, leaf_h).backward();
    const auto check = [&](const Tensor& base, const Tensor& grad, auto perturbed) {
      Values v = values_of(base), g = values_of(grad);
      for (size_t e = 0; e < v.size(); ++e) {
        Values up = v, down = v;
        up[e] += 1e-6, down[e] -= 1e-6;
        const double numeric = (perturbed(Tensor::from_vector(up, base.shape())) -
                                perturbed(Tensor::from_vector(down, base.shape()))) /
                               2e-6;
        EXPECT_NEAR(g[e], numeric, 1e-6) << "element " << e;
      }
    };
    check(x, leaf_x.grad(), [&](const Tensor& t) { return objective(t, h0).item<double>(); });
    check(h0, leaf_h.grad(), [&](const Tensor& t) { return objective(x, t).item<double>(); });
    // One parameter: the recurrent weights of the reverse direction.
    const Tensor w = m.named_parameters()[5].second;  // weight_hh_l0_reverse, a handle
    ASSERT_EQ(m.named_parameters()[5].first, "weight_hh_l0_reverse");
    const Tensor saved = add(w, 0.0);
    check(saved, w.grad(), [&](const Tensor& t) {
      NoGradGuard no_grad;
      w.assign_(t);
      const double value = objective(x, h0).item<double>();
      w.assign_(saved);
      return value;
    });
  }
}

// A cell stepped along a sequence is the one-layer module over it, the
// module being checked against the loop above.
TEST(RecurrentCell, StepsAlongASequenceAsTheLayerDoes) {
  for (nn::RecurrentKind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    manual_seed(15);
    nn::RecurrentCell cell(kind, {.input_size = 3, .hidden_size = 4, .dtype = DType::kFloat64});
    nn::Recurrent layer(kind, {.input_size = 3, .hidden_size = 4, .dtype = DType::kFloat64});
    nn::StateDict renamed;
    for (const auto& [name, t] : cell.state_dict()) renamed.insert(name + "_l0", t);
    layer.load_state_dict(renamed);
    const bool lstm = kind == nn::RecurrentKind::kLstm;
    Tensor x = randn({2, 3, 3}, DType::kFloat64);
    Tensor h0 = randn({1, 2, 4}, DType::kFloat64), c0 = randn({1, 2, 4}, DType::kFloat64);
    nn::RecurrentResult whole = layer.forward(x, h0, lstm ? c0 : Tensor());
    nn::RecurrentState state{reshape(h0, {2, 4}), lstm ? reshape(c0, {2, 4}) : Tensor()};
    for (int64_t t = 0; t < 3; ++t) {
      state = cell.forward(reshape(slice(x, 1, t, t + 1), {2, 3}), state);
      expect_near(values_of(state.h), values_of(slice(whole.output, 1, t, t + 1)), 1e-12);
    }
    if (lstm) expect_near(values_of(state.c), values_of(whole.c), 1e-12);
    // From zeros, forward(x) is the first step's h.
    expect_near(values_of(cell(reshape(slice(x, 1, 0, 1), {2, 3}))),
                values_of(slice(layer(x), 1, 0, 1)), 1e-12);
  }
  nn::GRUCell gru({.input_size = 3, .hidden_size = 4});
  EXPECT_EQ(gru.type_name(), "GRUCell");
  EXPECT_THAT(error_of([&] {
                gru(randn({2, 4}));
              }),
              HasSubstr("GRUCell(input_size=3) expects input of shape [batch, 3]"));
  EXPECT_THAT(error_of([&] {
                gru.forward(randn({2, 3}), {zeros({3, 4}), {}});
              }),
              HasSubstr("h must be [batch, hidden] = [2, 4]"));
  EXPECT_THAT(error_of([&] {
                gru.forward(randn({2, 3}), {{}, zeros({2, 4})});
              }),
              HasSubstr("c is for LSTMCell"));
}

// Eager, hybridized and exported-then-loaded give one answer, at the traced
// batch size and another.
TEST(Recurrent, OneAnswerInEveryMode) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-recurrent-", ::getpid());
  fs::create_directories(dir);
  for (nn::RecurrentKind kind : kKinds) {
    SCOPED_TRACE(kind_name(kind));
    manual_seed(14);
    auto m = std::make_shared<nn::Recurrent>(
        kind, nn::RecurrentOptions{
                  .input_size = 3, .hidden_size = 4, .num_layers = 2, .bidirectional = true});
    m->eval();
    NoGradGuard no_grad;
    Tensor traced = randn({2, 5, 3}), other = randn({4, 5, 3});
    Values eager_traced = values_of((*m)(traced)), eager_other = values_of((*m)(other));
    m->hybridize();
    expect_near(values_of((*m)(traced)), eager_traced, 1e-5);
    expect_near(values_of((*m)(traced)), eager_traced, 1e-5);  // A replay.
    const std::string path = (dir / str_cat("model", static_cast<int>(kind))).string();
    m->export_model(path);
    LoadedModel loaded = load(path);
    expect_near(values_of(loaded.run({traced})[0]), eager_traced, 1e-5);
    expect_near(values_of(loaded.run({other})[0]), eager_other, 1e-5);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem
