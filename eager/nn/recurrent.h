// Recurrent layers over whole sequences: nn::RNN, nn::LSTM and nn::GRU, as
// torch.nn's (multi-layer, bidirectional, dropout between layers, initial
// states).
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
// Note [Recurrence as a composition of ops]
// A layer is written with the eager ops: one product projects the whole
// sequence's inputs (x W_ih^T + b_ih for every step at once), then each step
// adds h W_hh^T + b_hh and applies its gates. So gradients, hybridize and
// export come from those ops; a trace unrolls the loop at the traced
// sequence length. A zero initial state (the default) is not materialized:
// the first step's recurrent term is b_hh alone, which also keeps the batch
// size free in an exported graph (a zeros({batch, hidden}) would fix it).
// oneDNN's RNN primitives, which run the loop in one kernel, are the faster
// path still to come behind the same modules.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

enum class RecurrentKind { kRnnTanh, kRnnRelu, kLstm, kGru };

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

// forward(x, h0, c0)'s results: the last layer's output at every step
// [batch, seq, directions * hidden] (batch_first), and the final states of
// every layer and direction, [num_layers * directions, batch, hidden] (c:
// LSTM only).
struct RecurrentResult {
  Tensor output;
  Tensor h;
  Tensor c;
};

class Recurrent : public Module {
 public:
  Recurrent(RecurrentKind kind, const RecurrentOptions& options);

  // The output at every step, from zero initial states.
  Tensor forward(const Tensor& x) override;
  // From initial states h0 (and c0 for LSTM) of shape [num_layers *
  // directions, batch, hidden]; undefined means zeros.
  RecurrentResult forward(const Tensor& x, const Tensor& h0, const Tensor& c0 = {},
                          std::source_location where = std::source_location::current());

  std::string type_name() const override;
  std::string extra_repr() const override;
  const RecurrentOptions& options() const { return options_; }
  RecurrentKind kind() const { return kind_; }

 private:
  struct Weights {
    Tensor ih, hh, bias_ih, bias_hh;
  };
  struct State {
    Tensor h, c;  // [batch, hidden]; undefined: zeros.
  };
  // `final_states`: also stack the final states into the result's h and c.
  RecurrentResult run(const Tensor& x, const Tensor& h0, const Tensor& c0, bool final_states);
  // One direction of one layer over `steps` (each [batch, gates * hidden],
  // the input projection already applied); fills `outputs` in sequence order.
  State run_direction(const Weights& w, const std::vector<Tensor>& steps, bool reverse, State state,
                      std::vector<Tensor>& outputs) const;
  State step(const Weights& w, const Tensor& projected, const State& state) const;
  int64_t gates() const;

  RecurrentKind kind_;
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

}  // namespace tandem::nn
