// What the recurrence kernels share (the CPU's in kernels/ops/recurrence.cc,
// the GPU's in kernels/cuda/recurrence.cu): the four cells, where each
// call's inputs and outputs are, and a call's geometry. The equations are
// in recurrence.cc's header comment.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/shape.h"
#include "kernels/attrs.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

enum class RecurrentCell { kRnnTanh, kRnnRelu, kLstm, kGru };

// What a cell's calls hold, in this order:
//   forward:  (projected, weight_hh, bias_hh, initial states)
//             -> (output, final states, saved)
//   backward: (weight_hh, output, saved, the gradients of output and of the
//             final states[, of saved], initial states)
//             -> (grad_projected, grad_weight_hh, grad_bias_hh, the initial
//             states' gradients)
// (The ops' names are in the files that define them.)
struct RecurrenceLayout {
  int gates;   // Blocks of `hidden` in projected: 1, 4 or 3.
  int states;  // h, and c for lstm.
  // The saved outputs: none for rnn; a [batch, seq, hidden] one (lstm's
  // every c_t, gru's every R_n + b_hn), then the activated gates.
  const char* saved_state;
  constexpr int saved() const { return saved_state != nullptr ? 2 : 0; }
};

// The kernels hold it as a static constexpr local: GCC 12 stops with an
// internal error on a constexpr local of class type that lambdas capture.
constexpr RecurrenceLayout recurrence_layout(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::kRnnTanh:
      return {1, 1, nullptr};
    case RecurrentCell::kRnnRelu:
      return {1, 1, nullptr};
    case RecurrentCell::kLstm:
      return {4, 2, "cells"};
    case RecurrentCell::kGru:
      return {3, 1, "recurrent_new"};
  }
  return {};
}

// Whether the call gives initial state k (0: h0, 1: c0).
inline bool initial_state_given(const RecurrenceLayout& cell, const Attrs& attrs, int k) {
  return k < cell.states && attrs.get_bool(k == 0 ? "initial_h" : "initial_c");
}

// A call's sizes and which initial states it gives.
struct RecurrenceGeometry {
  int64_t batch = 0, steps = 0, hidden = 0, width = 0;  // width: gates * hidden.
  bool reverse = false;
  bool initial_h = false, initial_c = false;

  // From a [batch, seq, hidden] sequence (unchecked: inference checks).
  RecurrenceGeometry(const RecurrenceLayout& cell, const Shape& sequence, const Attrs& attrs)
      : batch(sequence[0]),
        steps(sequence[1]),
        hidden(sequence[2]),
        width(cell.gates * sequence[2]),
        reverse(attrs.get_bool("reverse")),
        initial_h(initial_state_given(cell, attrs, 0)),
        initial_c(initial_state_given(cell, attrs, 1)) {}

  // The position in the sequence of the s-th step taken.
  TANDEM_HOST_DEVICE int64_t step_at(int64_t s) const { return reverse ? steps - 1 - s : s; }
  // The position of the step taken before it (s > 0).
  TANDEM_HOST_DEVICE int64_t before(int64_t s) const { return reverse ? steps - s : s - 1; }
  // Where element (b, t) of a [batch, seq, features] tensor starts.
  TANDEM_HOST_DEVICE int64_t row(int64_t b, int64_t t, int64_t features) const {
    return (b * steps + t) * features;
  }
};

// Where the backward's inputs are (the order above).
struct RecurrenceBackwardInputs {
  size_t saved, grads, saved_grads, initial;
  RecurrenceBackwardInputs(const RecurrenceLayout& cell, const Attrs& attrs)
      : saved(2),
        grads(saved + cell.saved()),
        saved_grads(grads + 1 + cell.states),
        initial(saved_grads + (attrs.get_bool("saved_gradients") ? cell.saved() : 0)) {}
};

}  // namespace tandem::kernels
