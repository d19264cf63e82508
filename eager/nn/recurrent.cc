#include "eager/nn/recurrent.h"

#include <cmath>

#include "absl/types/span.h"

#include "core/error.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

RecurrentBase::RecurrentBase(RecurrentKind kind, int64_t input_size, int64_t hidden_size, bool bias,
                             DType dtype, const char* suffix_of_type)
    : kind_(kind),
      hidden_size_(hidden_size),
      bias_(bias),
      dtype_(dtype),
      suffix_of_type_(suffix_of_type) {
  TANDEM_CHECK(input_size > 0 && hidden_size > 0, type_name(),
               " needs positive input_size and hidden_size, got ", input_size, " and ",
               hidden_size);
  if (!bias) zero_bias_ = register_constant(zeros({gates() * hidden_size}, dtype));
}

RecurrentBase::Weights RecurrentBase::add_weights(const std::string& suffix, int64_t in) {
  const int64_t rows = gates() * hidden_size_;
  const double bound = 1 / std::sqrt(static_cast<double>(hidden_size_));
  const auto parameter = [&](const std::string& name, Shape shape) {
    Tensor t = register_parameter(name, Tensor::empty(std::move(shape), dtype_));
    init::uniform_(t, -bound, bound);
    return t;
  };
  Weights w;
  w.ih = parameter("weight_ih" + suffix, {rows, in});
  w.hh = parameter("weight_hh" + suffix, {rows, hidden_size_});
  w.bias_ih = bias_ ? parameter("bias_ih" + suffix, {rows}) : zero_bias_;
  w.bias_hh = bias_ ? parameter("bias_hh" + suffix, {rows}) : zero_bias_;
  return w;
}

int64_t RecurrentBase::gates() const {
  switch (kind_) {
    case RecurrentKind::kLstm:
      return 4;
    case RecurrentKind::kGru:
      return 3;
    default:
      return 1;
  }
}

std::string RecurrentBase::type_name() const {
  switch (kind_) {
    case RecurrentKind::kLstm:
      return str_cat("LSTM", suffix_of_type_);
    case RecurrentKind::kGru:
      return str_cat("GRU", suffix_of_type_);
    default:
      return str_cat("RNN", suffix_of_type_);
  }
}

Recurrent::Recurrent(RecurrentKind kind, const RecurrentOptions& options)
    : RecurrentBase(kind, options.input_size, options.hidden_size, options.bias, options.dtype, ""),
      options_(options) {
  const RecurrentOptions& o = options;
  TANDEM_CHECK(o.num_layers > 0, type_name(), " needs num_layers > 0, got ", o.num_layers);
  TANDEM_CHECK(o.dropout >= 0 && o.dropout < 1, type_name(), ": dropout must be in [0, 1), got ",
               o.dropout);
  const int64_t directions = o.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    const int64_t in = layer == 0 ? o.input_size : directions * o.hidden_size;
    for (int64_t direction = 0; direction < directions; ++direction) {
      weights_.push_back(add_weights(str_cat("_l", layer, direction == 1 ? "_reverse" : ""), in));
    }
  }
}

std::string Recurrent::extra_repr() const {
  const RecurrentOptions& o = options_;
  return str_cat(o.input_size, ", ", o.hidden_size, ", num_layers=", o.num_layers,
                 kind() == RecurrentKind::kRnnRelu ? ", nonlinearity=relu" : "",
                 ", bias=", o.bias ? "true" : "false",
                 ", batch_first=", o.batch_first ? "true" : "false", ", dropout=", o.dropout,
                 ", bidirectional=", o.bidirectional ? "true" : "false");
}

Tensor Recurrent::forward(const Tensor& x) { return run(x, {}, {}, /*final_states=*/false).output; }

RecurrentResult Recurrent::forward(const Tensor& x, const Tensor& h0, const Tensor& c0,
                                   std::source_location where) {
  CallScope call(*this, where);
  return run(x, h0, c0, /*final_states=*/true);
}

RecurrentState RecurrentBase::step(const Weights& w, const Tensor& projected,
                                   const RecurrentState& state) const {
  const std::source_location site = call_site();
  const int64_t hidden = hidden_size_;
  // h W_hh^T + b_hh; b_hh alone for a zero state (Note [Recurrence in one
  // op]).
  const Tensor recurrent = state.h.defined() ? linear(state.h, w.hh, w.bias_hh, site) : w.bias_hh;
  switch (kind_) {
    case RecurrentKind::kRnnTanh:
      return {tanh(add(projected, recurrent, site), site), {}};
    case RecurrentKind::kRnnRelu:
      return {relu(add(projected, recurrent, site), site), {}};
    case RecurrentKind::kLstm: {
      std::vector<Tensor> g =
          split(add(projected, recurrent, site), {hidden, hidden, hidden, hidden}, -1, site);
      Tensor input_gate = sigmoid(g[0], site), forget_gate = sigmoid(g[1], site);
      Tensor candidate = tanh(g[2], site), output_gate = sigmoid(g[3], site);
      Tensor c = mul(input_gate, candidate, site);
      if (state.c.defined()) c = add(mul(forget_gate, state.c, site), c, site);
      return {mul(output_gate, tanh(c, site), site), c};
    }
    case RecurrentKind::kGru: {
      std::vector<Tensor> x = split(projected, {hidden, hidden, hidden}, -1, site);
      std::vector<Tensor> h = split(recurrent, {hidden, hidden, hidden}, -1, site);
      Tensor reset = sigmoid(add(x[0], h[0], site), site);
      Tensor update = sigmoid(add(x[1], h[1], site), site);
      Tensor candidate = tanh(add(x[2], mul(reset, h[2], site), site), site);
      // (1 - z) n + z h, as n + z (h - n); with h = 0, n - z n.
      Tensor previous_minus_candidate =
          state.h.defined() ? sub(state.h, candidate, site) : neg(candidate, site);
      return {add(candidate, mul(update, previous_minus_candidate, site), site), {}};
    }
  }
  throw Error("unreachable");
}

RecurrentResult Recurrent::run(const Tensor& x, const Tensor& h0, const Tensor& c0,
                               bool final_states) {
  const std::source_location site = call_site();
  const RecurrentOptions& o = options_;
  const char* layout = o.batch_first ? "[batch, seq, " : "[seq, batch, ";
  TANDEM_CHECK(
      x.rank() == 3 && x.shape()[2] == o.input_size && x.shape()[1] > 0 && x.shape()[0] > 0,
      type_name(), "(input_size=", o.input_size, ") expects input of shape ", layout, o.input_size,
      "] with a non-empty sequence, got ", x.shape().to_string());
  Tensor input = o.batch_first ? x : transpose(x, {1, 0, 2}, site);
  const int64_t batch = input.shape()[0];
  const int64_t directions = o.bidirectional ? 2 : 1, hidden = o.hidden_size;
  const int64_t states = o.num_layers * directions;
  const Shape state_shape{states, batch, hidden};
  TANDEM_CHECK(!h0.defined() || h0.shape() == state_shape, type_name(), ": h0 must be ",
               state_shape.to_string(), " [num_layers * directions, batch, hidden], got ",
               h0.shape().to_string());
  TANDEM_CHECK(!c0.defined() || kind() == RecurrentKind::kLstm, type_name(),
               " has no cell state; c0 is for LSTM");
  TANDEM_CHECK(!c0.defined() || c0.shape() == state_shape, type_name(), ": c0 must be ",
               state_shape.to_string(), " [num_layers * directions, batch, hidden], got ",
               c0.shape().to_string());
  const auto initial = [&](const Tensor& all, int64_t index) {
    return all.defined() ? reshape(slice(all, 0, index, index + 1, 1, site), {batch, hidden}, site)
                         : Tensor();
  };

  std::vector<Tensor> final_h, final_c;
  for (int64_t layer = 0; layer < o.num_layers; ++layer) {
    std::vector<Tensor> direction_outputs;
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const Weights& w = weights_[static_cast<size_t>(index)];
      // Every step's input projection in one product.
      Tensor projected = linear(input, w.ih, w.bias_ih, site);  // [batch, seq, gates * hidden]
      // The recurrence in one op (Note [Recurrence in one op]).
      std::vector<Tensor> out = recurrent_layer(kind(), projected, w.hh, w.bias_hh,
                                                initial(h0, index), initial(c0, index),
                                                /*reverse=*/direction == 1, site);
      direction_outputs.push_back(out[0]);
      final_h.push_back(out[1]);
      if (kind() == RecurrentKind::kLstm) final_c.push_back(out[2]);
    }
    input = directions == 2 ? concat(direction_outputs, -1, site) : direction_outputs[0];
    if (o.dropout > 0 && is_training() && layer + 1 < o.num_layers) {
      input = dropout(input, o.dropout, /*training=*/true, site);
    }
  }
  RecurrentResult result;
  result.output = o.batch_first ? input : transpose(input, {1, 0, 2}, site);
  if (final_states) {
    result.h = stack(final_h, 0, site);
    if (kind() == RecurrentKind::kLstm) result.c = stack(final_c, 0, site);
  }
  return result;
}

RecurrentCell::RecurrentCell(RecurrentKind kind, const RecurrentCellOptions& options)
    : RecurrentBase(kind, options.input_size, options.hidden_size, options.bias, options.dtype,
                    "Cell"),
      options_(options),
      weights_(add_weights("", options.input_size)) {}

Tensor RecurrentCell::forward(const Tensor& x) { return run(x, {}).h; }

RecurrentState RecurrentCell::forward(const Tensor& x, const RecurrentState& state,
                                      std::source_location where) {
  CallScope call(*this, where);
  return run(x, state);
}

RecurrentState RecurrentCell::run(const Tensor& x, const RecurrentState& state) {
  const RecurrentCellOptions& o = options_;
  TANDEM_CHECK(x.rank() == 2 && x.shape()[1] == o.input_size, type_name(),
               "(input_size=", o.input_size, ") expects input of shape [batch, ", o.input_size,
               "], got ", x.shape().to_string());
  const Shape state_shape{x.shape()[0], o.hidden_size};
  TANDEM_CHECK(!state.h.defined() || state.h.shape() == state_shape, type_name(),
               ": h must be [batch, hidden] = ", state_shape.to_string(), ", got ",
               state.h.shape().to_string());
  TANDEM_CHECK(!state.c.defined() || kind() == RecurrentKind::kLstm, type_name(),
               " has no cell state; c is for LSTMCell");
  TANDEM_CHECK(!state.c.defined() || state.c.shape() == state_shape, type_name(),
               ": c must be [batch, hidden] = ", state_shape.to_string(), ", got ",
               state.c.shape().to_string());
  return step(weights_, linear(x, weights_.ih, weights_.bias_ih, call_site()), state);
}

std::string RecurrentCell::extra_repr() const {
  return str_cat(options_.input_size, ", ", options_.hidden_size,
                 kind() == RecurrentKind::kRnnRelu ? ", nonlinearity=relu" : "",
                 ", bias=", options_.bias ? "true" : "false");
}

}  // namespace tandem::nn
