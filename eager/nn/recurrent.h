// Recurrent layers over whole sequences: nn::RNN, nn::LSTM and nn::GRU, as
// torch.nn's (multi-layer, bidirectional, dropout between layers, initial
// states); and their single steps, nn::RNNCell, nn::LSTMCell, nn::GRUCell.
//
//   auto lstm = std::make_shared<nn::LSTM>(nn::RecurrentOptions{
//       .input_size = 16, .hidden_size = 32, .num_layers = 2, .bidirectional = true});
//   Tensor out = (*lstm)(x);                      // x [batch, seq, 16] -> [batch, seq, 64]
//   nn::RecurrentResult r = lstm->forward(x, h0, c0);   // r.output, r.h, r.c
//
// Per layer k and direction (suffix "_reverse" for the backward one), with
// torch's names, shapes and initialization (uniform in +-1/sqrt(hidden)):
// "weight_ih_l{k}" [gates * hidden, in], "weight_hh_l{k}" [gates * hidden,
// hidden], "bias_ih_l{k}", "bias_hh_l{k}" [gates * hidden]; gates are 4 for
// LSTM (input, forget, cell, output), 3 for GRU (reset, update, new), 1 for
// RNN. A torch state_dict of a layer with the same options loads as is.
//
// Note [Recurrence in one op]
// A layer projects the whole sequence's inputs in one product (x W_ih^T +
// b_ih for every step at once), then runs its recurrence as one op per
// direction (rnn_tanh, rnn_relu, lstm or gru, kernels/ops/recurrence.cc): a
// matrix product per step and one pass over the gates, and a backward
// through time of its own. A graph holds one node per layer and direction,
// whatever the sequence length, so an exported layer leaves its sequence
// length free. The cells are one step, written with the eager ops: h W_hh^T
// + b_hh, then the gates. A zero initial state (the default) is not
// materialized: the cell's recurrent term is b_hh alone, which also keeps
// the batch size free in an exported graph (a zeros({batch, hidden}) would
// fix it).
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "eager/nn/module.h"
#include "eager/ops.h"

namespace tandem::nn {

using ::tandem::RecurrentKind;

struct RecurrentOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 1;
  bool bias = true;
  // Input and output [batch, seq, features]; true unlike torch's default, as
  // for MultiheadAttention: an exported graph leaves dimension 0 free.
  bool batch_first = true;
  double dropout = 0;  // On each layer's output but the last, in training mode.
  bool bidirectional = false;
  DType dtype = DType::kFloat32;
};

// The state of one layer and direction: h [batch, hidden], and for LSTM the
// cell state c; an undefined tensor means zeros.
struct RecurrentState {
  Tensor h;
  Tensor c;
};

// forward(x, h0, c0)'s results: the last layer's output at every step
// [batch, seq, directions * hidden] (batch_first), and the final states of
// every layer and direction, [num_layers * directions, batch, hidden] (c:
// LSTM only).
struct RecurrentResult {
  Tensor output;
  Tensor h;
  Tensor c;
};

// What the layers and the cells share: the kind, the weights of one step,
// and the step itself.
class RecurrentBase : public Module {
 public:
  RecurrentKind kind() const { return kind_; }
  std::string type_name() const override;

 protected:
  struct Weights {
    Tensor ih, hh, bias_ih, bias_hh;
  };
  RecurrentBase(RecurrentKind kind, int64_t input_size, int64_t hidden_size, bool bias, DType dtype,
                const char* suffix_of_type);
  // Registers "weight_ih" + suffix [gates * hidden, in], "weight_hh" + suffix,
  // and the biases (or zero constants), uniform in +-1/sqrt(hidden).
  Weights add_weights(const std::string& suffix, int64_t in);
  // One step from `projected` = x W_ih^T + b_ih, [batch, gates * hidden].
  RecurrentState step(const Weights& w, const Tensor& projected, const RecurrentState& state) const;
  int64_t gates() const;
  int64_t hidden_size() const { return hidden_size_; }

 private:
  RecurrentKind kind_;
  int64_t hidden_size_;
  bool bias_;
  DType dtype_;
  const char* suffix_of_type_;  // "" or "Cell".
  Tensor zero_bias_;            // Without bias: stands in for both biases.
};

class Recurrent : public RecurrentBase {
 public:
  Recurrent(RecurrentKind kind, const RecurrentOptions& options);

  // The output at every step, from zero initial states.
  Tensor forward(const Tensor& x) override;
  // From initial states h0 (and c0 for LSTM) of shape [num_layers *
  // directions, batch, hidden]; undefined means zeros.
  RecurrentResult forward(const Tensor& x, const Tensor& h0, const Tensor& c0 = {},
                          std::source_location where = std::source_location::current());

  std::string extra_repr() const override;
  const RecurrentOptions& options() const { return options_; }

 private:
  // `final_states`: also stack the final states into the result's h and c.
  RecurrentResult run(const Tensor& x, const Tensor& h0, const Tensor& c0, bool final_states);
  RecurrentOptions options_;
  std::vector<Weights> weights_;  // Layer-major, forward direction first.
};

class RNN : public Recurrent {
 public:
  // `relu`: max(0, .) instead of tanh (torch's nonlinearity="relu").
  explicit RNN(const RecurrentOptions& options, bool relu = false)
      : Recurrent(relu ? RecurrentKind::kRnnRelu : RecurrentKind::kRnnTanh, options) {}
};

class LSTM : public Recurrent {
 public:
  explicit LSTM(const RecurrentOptions& options) : Recurrent(RecurrentKind::kLstm, options) {}
};

class GRU : public Recurrent {
 public:
  explicit GRU(const RecurrentOptions& options) : Recurrent(RecurrentKind::kGru, options) {}
};

// One step of a recurrence, as torch's RNNCell, LSTMCell and GRUCell: the
// same equations and initialization as the layers, parameters "weight_ih"
// [gates * hidden, input], "weight_hh", "bias_ih", "bias_hh".
//
//   nn::LSTMCell cell({.input_size = 8, .hidden_size = 16});
//   nn::RecurrentState s;                      // zeros
//   for (const Tensor& x : steps) s = cell.forward(x, s);   // x [batch, 8]
struct RecurrentCellOptions {
  int64_t input_size = 0;
  int64_t hidden_size = 0;
  bool bias = true;
  DType dtype = DType::kFloat32;
};

class RecurrentCell : public RecurrentBase {
 public:
  RecurrentCell(RecurrentKind kind, const RecurrentCellOptions& options);

  // h after one step from a zero state.
  Tensor forward(const Tensor& x) override;
  // The state after one step of x [batch, input_size] from `state` (h, and c
  // for LSTM, each [batch, hidden]; undefined: zeros).
  RecurrentState forward(const Tensor& x, const RecurrentState& state,
                         std::source_location where = std::source_location::current());

  std::string extra_repr() const override;
  const RecurrentCellOptions& options() const { return options_; }

 private:
  RecurrentState run(const Tensor& x, const RecurrentState& state);

  RecurrentCellOptions options_;
  Weights weights_;
};

class RNNCell : public RecurrentCell {
 public:
  explicit RNNCell(const RecurrentCellOptions& options, bool relu = false)
      : RecurrentCell(relu ? RecurrentKind::kRnnRelu : RecurrentKind::kRnnTanh, options) {}
};

class LSTMCell : public RecurrentCell {
 public:
  explicit LSTMCell(const RecurrentCellOptions& options)
      : RecurrentCell(RecurrentKind::kLstm, options) {}
};

class GRUCell : public RecurrentCell {
 public:
  explicit GRUCell(const RecurrentCellOptions& options)
      : RecurrentCell(RecurrentKind::kGru, options) {}
};

}  // namespace tandem::nn
