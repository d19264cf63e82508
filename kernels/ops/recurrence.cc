// The recurrent layers' ops: rnn_tanh, rnn_relu, lstm and gru each run one
// layer in one direction over a whole sequence, and each has a backward
// through time (rnn_tanh_backward, ...). The input projection
// P = x W_ih^T + b_ih is not part of them (a linear op before them computes
// every step's at once, and its gradient is linear's). An op runs the
// recurrence: one sgemm per step for R_t = h_(t-1) W_hh^T, and one pass over
// the gates that adds b_hh, in torch's gate order and equations:
//   rnn:  h_t = tanh or relu(P_t + R_t + b_hh)
//   lstm: i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of the quarters of
//         P_t + R_t + b_hh;  c_t = f c_(t-1) + i g,  h_t = o tanh(c_t)
//   gru:  r, z = sigmoid of the first two thirds of P_t + R_t + b_hh;
//         n = tanh(P_n + r (R_n + b_hn)),  h_t = (1 - z) n + z h_(t-1)
// h_(-1) = h0 (and c_(-1) = c0) where the call gives them, zeros otherwise;
// `reverse` runs from the last step to the first. Outputs: every h_t
// [batch, seq, hidden]; the final h (and c); and, saved for the backward,
// lstm's every c_t or gru's every R_n + b_hn [batch, seq, hidden], and the
// activated gates [batch, seq, gates * hidden].
#include "kernels/recurrence.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

struct OpNames {
  const char* forward;
  const char* backward;
};

constexpr OpNames op_names(RecurrentCell cell) {
  switch (cell) {
    case RecurrentCell::kRnnTanh:
      return {"rnn_tanh", "rnn_tanh_backward"};
    case RecurrentCell::kRnnRelu:
      return {"rnn_relu", "rnn_relu_backward"};
    case RecurrentCell::kLstm:
      return {"lstm", "lstm_backward"};
    case RecurrentCell::kGru:
      return {"gru", "gru_backward"};
  }
  return {};
}

// "4 * hidden" for lstm's projected width, "hidden" for rnn's.
std::string width_text(const RecurrenceLayout& cell) {
  return cell.gates == 1 ? "hidden" : str_cat(cell.gates, " * hidden");
}

size_t initial_states(const RecurrenceLayout& cell, const Attrs& attrs) {
  return (initial_state_given(cell, attrs, 0) ? 1 : 0) +
         (initial_state_given(cell, attrs, 1) ? 1 : 0);
}

// The geometry of [batch, seq, hidden] `sequence` with weight_hh, checked.
RecurrenceGeometry geometry_of(const RecurrenceLayout& cell, const Shape& sequence,
                               const Shape& weight_hh, const Attrs& attrs) {
  const RecurrenceGeometry g(cell, sequence, attrs);
  TANDEM_CHECK(weight_hh == Shape({g.width, g.hidden}), "weight_hh must be [", width_text(cell),
               ", hidden] = ", Shape({g.width, g.hidden}).to_string(), " for hidden ", g.hidden,
               ", got ", weight_hh.to_string());
  return g;
}

// The forward's geometry, from projected [batch, seq, gates * hidden].
RecurrenceGeometry forward_geometry(const RecurrenceLayout& cell, const Shape& projected,
                                    const Shape& weight_hh, const Shape& bias_hh,
                                    const Attrs& attrs) {
  TANDEM_CHECK(projected.rank() == 3 && projected[2] % cell.gates == 0,
               "projected must be [batch, seq, ", width_text(cell), "], got ",
               projected.to_string());
  const RecurrenceGeometry g = geometry_of(
      cell, Shape({projected[0], projected[1], projected[2] / cell.gates}), weight_hh, attrs);
  TANDEM_CHECK(bias_hh == Shape({g.width}), "bias_hh must be [", g.width, "], got ",
               bias_hh.to_string());
  return g;
}

void check_states(absl::Span<const TensorMeta> states, const RecurrenceGeometry& g, DType dtype) {
  const Shape want{g.batch, g.hidden};
  for (const TensorMeta& s : states) {
    TANDEM_CHECK(s.shape == want && s.dtype == dtype, "an initial state must be ",
                 dtype_name(dtype), " [batch, hidden] = ", want.to_string(), ", got ",
                 dtype_name(s.dtype), " ", s.shape.to_string());
  }
}

const char* initial_attrs_text(const RecurrenceLayout& cell) {
  return cell.states == 2 ? "initial_h and initial_c say" : "initial_h says";
}

template <RecurrentCell kCell>
TensorMetas infer_recurrence(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const size_t states = initial_states(cell, attrs);
  TANDEM_CHECK(in.size() == 3 + states, "takes projected, weight_hh, bias_hh and ", states,
               " initial states (as ", initial_attrs_text(cell), "), got ", in.size(), " inputs");
  check_floating("projected", in[0].dtype);
  for (int k = 1; k < 3; ++k) {
    TANDEM_CHECK(in[k].dtype == in[0].dtype, "weight_hh and bias_hh must be ",
                 dtype_name(in[0].dtype), " as projected is, got ", dtype_name(in[k].dtype));
  }
  const RecurrenceGeometry g = forward_geometry(cell, in[0].shape, in[1].shape, in[2].shape, attrs);
  check_states(in.subspan(3), g, in[0].dtype);
  const DType t = in[0].dtype;
  const Shape sequence{g.batch, g.steps, g.hidden}, state{g.batch, g.hidden};
  TensorMetas out = {{sequence, t}};
  for (int k = 0; k < cell.states; ++k) out.push_back({state, t});
  if (cell.saved() > 0) {
    out.push_back({sequence, t});
    out.push_back({in[0].shape, t});
  }
  return out;
}

template <RecurrentCell kCell>
TensorMetas infer_recurrence_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const RecurrenceBackwardInputs at(cell, attrs);
  const size_t states = initial_states(cell, attrs);
  TANDEM_CHECK(in.size() == at.initial + states, "takes weight_hh, output, ",
               cell.saved() > 0 ? str_cat(cell.saved_state, ", gates, ") : "",
               at.initial - at.grads, " of their gradients and ", states,
               " initial states (as saved_gradients and ", initial_attrs_text(cell), "), got ",
               in.size(), " inputs");
  check_floating("output", in[1].dtype);
  const DType t = in[1].dtype;
  TANDEM_CHECK(in[1].shape.rank() == 3, "output must be [batch, seq, hidden], got ",
               in[1].shape.to_string());
  const RecurrenceGeometry g = geometry_of(cell, in[1].shape, in[0].shape, attrs);
  TANDEM_CHECK(in[0].dtype == t, "weight_hh must be ", dtype_name(t), " as output is, got ",
               dtype_name(in[0].dtype));
  const Shape sequence{g.batch, g.steps, g.hidden}, state{g.batch, g.hidden};
  const Shape gates{g.batch, g.steps, g.width};
  // What inputs 1 to `initial` must be, and their names.
  std::vector<std::pair<std::string, Shape>> want = {{"output", sequence}};
  const auto add_saved = [&](const std::string& prefix) {
    if (cell.saved() == 0) return;
    want.push_back({prefix + cell.saved_state, sequence});
    want.push_back({prefix + "gates", gates});
  };
  add_saved("");
  want.push_back({"the gradient of output", sequence});
  want.push_back({"the gradient of h_n", state});
  if (cell.states == 2) want.push_back({"the gradient of c_n", state});
  if (at.initial > at.saved_grads) add_saved("the gradient of ");
  for (size_t k = 1; k < at.initial; ++k) {
    const auto& [name, shape] = want[k - 1];
    TANDEM_CHECK(in[k].shape == shape && in[k].dtype == t, name, " must be ", dtype_name(t), " ",
                 shape.to_string(), ", got ", dtype_name(in[k].dtype), " ",
                 in[k].shape.to_string());
  }
  check_states(in.subspan(at.initial), g, t);
  TensorMetas out = {{gates, t}, in[0], {Shape({g.width}), t}};
  for (size_t k = 0; k < states; ++k) out.push_back({state, t});
  return out;
}

// The gate passes, one row (a sample at a step) each (Note [Row passes in
// two builds] in kernels/cpu/fast_exp.h). p is the row of projected, r of
// R_t, bias is b_hh. The pointers never overlap (restrict), and null tests
// stay outside the loops, so that GCC vectorizes them.

template <class T>
TANDEM_VECTOR_CLONES void rnn_tanh_row(const T* __restrict p, const T* __restrict r,
                                       const T* __restrict bias, T* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) h[j] = cpu::fast_tanh(p[j] + r[j] + bias[j]);
}

template <class T>
TANDEM_VECTOR_CLONES void rnn_relu_row(const T* __restrict p, const T* __restrict r,
                                       const T* __restrict bias, T* __restrict h, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) {
    const T v = p[j] + r[j] + bias[j];
    h[j] = v > T{0} ? v : (v != v ? v : T{0});  // The relu op's: NaN stays.
  }
}

// gates receives i, f, g, o; writes c_t and h_t. c_prev is null for a zero
// state.
template <class T>
TANDEM_VECTOR_CLONES void lstm_row(const T* __restrict p, const T* __restrict r,
                                   const T* __restrict bias, const T* __restrict c_prev,
                                   T* __restrict gates, T* __restrict c, T* __restrict h,
                                   int64_t hidden) {
  T* i = gates;
  T* f = gates + hidden;
  T* g = gates + 2 * hidden;
  T* o = gates + 3 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    i[j] = cpu::fast_sigmoid(p[j] + r[j] + bias[j]);
    f[j] = cpu::fast_sigmoid(p[hidden + j] + r[hidden + j] + bias[hidden + j]);
    g[j] = cpu::fast_tanh(p[2 * hidden + j] + r[2 * hidden + j] + bias[2 * hidden + j]);
    o[j] = cpu::fast_sigmoid(p[3 * hidden + j] + r[3 * hidden + j] + bias[3 * hidden + j]);
  }
  if (c_prev != nullptr) {
    for (int64_t j = 0; j < hidden; ++j) c[j] = f[j] * c_prev[j] + i[j] * g[j];
  } else {
    for (int64_t j = 0; j < hidden; ++j) c[j] = i[j] * g[j];
  }
  for (int64_t j = 0; j < hidden; ++j) h[j] = o[j] * cpu::fast_tanh(c[j]);
}

// gates receives r, z, n and recurrent_new R_n + b_hn; writes h_t. h_prev
// is null for a zero state.
template <class T>
TANDEM_VECTOR_CLONES void gru_row(const T* __restrict p, const T* __restrict r,
                                  const T* __restrict bias, const T* __restrict h_prev,
                                  T* __restrict gates, T* __restrict recurrent_new, T* __restrict h,
                                  int64_t hidden) {
  T* reset = gates;
  T* update = gates + hidden;
  T* candidate = gates + 2 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    reset[j] = cpu::fast_sigmoid(p[j] + r[j] + bias[j]);
    update[j] = cpu::fast_sigmoid(p[hidden + j] + r[hidden + j] + bias[hidden + j]);
    recurrent_new[j] = r[2 * hidden + j] + bias[2 * hidden + j];
    candidate[j] = cpu::fast_tanh(p[2 * hidden + j] + reset[j] * recurrent_new[j]);
  }
  // (1 - z) n + z h as n + z (h - n); with h = 0, n - z n.
  if (h_prev != nullptr) {
    for (int64_t j = 0; j < hidden; ++j)
      h[j] = candidate[j] + update[j] * (h_prev[j] - candidate[j]);
  } else {
    for (int64_t j = 0; j < hidden; ++j) h[j] = candidate[j] - update[j] * candidate[j];
  }
}

// The backward rows (Note [Backward through time]). dh is the step's output
// gradient (grad_output's plus what the next step sent back); each writes
// the gradient of the pre-activations into d_projected.

template <class T>
TANDEM_VECTOR_CLONES void rnn_tanh_backward_row(const T* __restrict h, const T* __restrict dh,
                                                T* __restrict d_projected, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) d_projected[j] = dh[j] * (1 - h[j] * h[j]);
}

template <class T>
TANDEM_VECTOR_CLONES void rnn_relu_backward_row(const T* __restrict h, const T* __restrict dh,
                                                T* __restrict d_projected, int64_t hidden) {
  for (int64_t j = 0; j < hidden; ++j) d_projected[j] = h[j] > T{0} ? dh[j] : T{0};
}

// dc holds what the next step sent through c and becomes what flows to
// c_(t-1). c_prev is a row of zeros for a zero state.
template <class T>
TANDEM_VECTOR_CLONES void lstm_backward_row(const T* __restrict gates, const T* __restrict c,
                                            const T* __restrict c_prev, const T* __restrict dh,
                                            T* __restrict dc, T* __restrict d_gates,
                                            int64_t hidden) {
  const T* i = gates;
  const T* f = gates + hidden;
  const T* g = gates + 2 * hidden;
  const T* o = gates + 3 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    const T tanh_c = cpu::fast_tanh(c[j]);
    const T d_c = dc[j] + dh[j] * o[j] * (1 - tanh_c * tanh_c);
    d_gates[j] = d_c * g[j] * i[j] * (1 - i[j]);
    d_gates[hidden + j] = d_c * c_prev[j] * f[j] * (1 - f[j]);
    d_gates[2 * hidden + j] = d_c * i[j] * (1 - g[j] * g[j]);
    d_gates[3 * hidden + j] = dh[j] * tanh_c * o[j] * (1 - o[j]);
    dc[j] = d_c * f[j];
  }
}

// The part of lstm's gates' gradient that comes from the activated gates'
// own gradient (a saved output, which a graph may use): each quarter's
// times its activation's derivative, added to d_gates.
template <class T>
TANDEM_VECTOR_CLONES void add_activated_gates_gradient(const T* gates, const T* grad_gates,
                                                       T* d_gates, int64_t hidden) {
  for (int64_t j = 0; j < 4 * hidden; ++j) {
    const T a = gates[j];
    const bool cell = j >= 2 * hidden && j < 3 * hidden;
    d_gates[j] += grad_gates[j] * (cell ? 1 - a * a : a * (1 - a));
  }
}

// gru's row writes two gradients: of P_t (d_projected) and of R_t + b_hh
// (d_recurrent); they differ in the candidate's third, where R_n enters
// times r. dh_prev receives the part of h_(t-1)'s gradient that bypasses
// W_hh, dh z. h_prev is a row of zeros for a zero state; own_gates and
// own_new are the saved outputs' own gradients (rows of zeros without).
template <class T>
TANDEM_VECTOR_CLONES void gru_backward_row(
    const T* __restrict gates, const T* __restrict recurrent_new, const T* __restrict h_prev,
    const T* __restrict dh, const T* __restrict own_gates, const T* __restrict own_new,
    T* __restrict d_projected, T* __restrict d_recurrent, T* __restrict dh_prev, int64_t hidden) {
  const int64_t n = hidden;
  for (int64_t j = 0; j < n; ++j) {
    const T reset = gates[j], update = gates[n + j], candidate = gates[2 * n + j];
    const T d_candidate =
        (dh[j] * (1 - update) + own_gates[2 * n + j]) * (1 - candidate * candidate);
    const T d_update = (dh[j] * (h_prev[j] - candidate) + own_gates[n + j]) * update * (1 - update);
    const T d_reset = (d_candidate * recurrent_new[j] + own_gates[j]) * reset * (1 - reset);
    d_projected[j] = d_recurrent[j] = d_reset;
    d_projected[n + j] = d_recurrent[n + j] = d_update;
    d_projected[2 * n + j] = d_candidate;
    d_recurrent[2 * n + j] = d_candidate * reset + own_new[j];
    dh_prev[j] = dh[j] * update;
  }
}

// Samples per thread in a step's gate pass: below some 4096 elements each,
// waking the other threads costs more than the pass (the OpenMP team is
// awake already from the step's product).
int64_t rows_per_thread(int64_t hidden) {
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(hidden, 1));  // hidden may be 0.
}

// The recurrence's multiply-adds, batch * seq * gates * hidden * hidden,
// from weight_hh [gates * hidden, hidden] and the output [batch, seq,
// hidden] (saturating: it only steers threading). At most
// onednn::kOneThreadWork of them run on one thread (Note [Small primitives
// on one thread]).
int64_t multiply_adds(const Shape& weight_hh, const Shape& output) {
  int64_t work;
  if (__builtin_mul_overflow(output.numel() / std::max<int64_t>(weight_hh[1], 1), weight_hh.numel(),
                             &work)) {
    return std::numeric_limits<int64_t>::max();
  }
  return work;
}
int64_t recurrence_work(const CallShapes& shapes) {
  return multiply_adds(*shapes.inputs[1], *shapes.outputs[0]);
}
bool recurrence_on_one_core(const CallShapes& shapes) {
  return recurrence_work(shapes) <= onednn::kOneThreadWork;
}
int64_t recurrence_backward_work(const CallShapes& shapes) {
  return multiply_adds(*shapes.inputs[0], *shapes.inputs[1]);
}
bool recurrence_backward_on_one_core(const CallShapes& shapes) {
  return recurrence_backward_work(shapes) <= onednn::kOneThreadWork;
}

template <RecurrentCell kCell>
void recurrence_kernel(const KernelContext& c) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const RecurrenceGeometry g = forward_geometry(cell, c.inputs[0].shape(), c.inputs[1].shape(),
                                                c.inputs[2].shape(), c.attrs);
  onednn::OneThread one_thread(multiply_adds(c.inputs[1].shape(), c.outputs[0].shape()) <=
                               onednn::kOneThreadWork);
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const T* projected = c.inputs[0].data<T>();
    const T* w_hh = c.inputs[1].data<T>();
    const T* b_hh = c.inputs[2].data<T>();
    const T* h0 = g.initial_h ? c.inputs[3].data<T>() : nullptr;
    const T* c0 = g.initial_c ? c.inputs[3 + (g.initial_h ? 1 : 0)].data<T>() : nullptr;
    T* y = c.outputs[0].data<T>();
    const int saved_at = 1 + cell.states;
    T* saved_state = cell.saved() > 0 ? c.outputs[saved_at].data<T>() : nullptr;
    T* gates = cell.saved() > 0 ? c.outputs[saved_at + 1].data<T>() : nullptr;
    const int64_t n = g.hidden, width = g.width;
    std::vector<T> recurrent(static_cast<size_t>(g.batch * width));  // R_t
    for (int64_t s = 0; s < g.steps; ++s) {
      const int64_t t = g.step_at(s);
      // h_(t-1) W_hh^T, from the previous step's output or h0.
      const T* h_prev = s > 0 ? y + g.before(s) * n : h0;
      const int64_t h_stride = s > 0 ? g.steps * n : n;
      if (h_prev != nullptr) {
        cpu::gemm(false, true, g.batch, width, n, T{1}, h_prev, h_stride, w_hh, n, T{0},
                  recurrent.data(), width);
      } else if (s == 0) {
        std::fill(recurrent.begin(), recurrent.end(), T{0});
      }
      parallel_for(g.batch, rows_per_thread(n), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t row = b * g.steps + t, at = row * n;
          const T* p = projected + row * width;
          const T* r = recurrent.data() + b * width;
          if constexpr (kCell == RecurrentCell::kRnnTanh) {
            rnn_tanh_row(p, r, b_hh, y + at, n);
          } else if constexpr (kCell == RecurrentCell::kRnnRelu) {
            rnn_relu_row(p, r, b_hh, y + at, n);
          } else if constexpr (kCell == RecurrentCell::kLstm) {
            const T* c_prev =
                s > 0 ? saved_state + g.row(b, g.before(s), n) : (c0 ? c0 + b * n : nullptr);
            lstm_row(p, r, b_hh, c_prev, gates + row * width, saved_state + at, y + at, n);
          } else {
            const T* h_row = h_prev != nullptr ? h_prev + b * h_stride : nullptr;
            gru_row(p, r, b_hh, h_row, gates + row * width, saved_state + at, y + at, n);
          }
        }
      });
    }
    // The final states: those of the last step taken, or the initial ones.
    for (int k = 0; k < cell.states; ++k) {
      T* final_state = c.outputs[1 + k].data<T>();
      const T* sequence = k == 0 ? y : saved_state;
      const T* initial = k == 0 ? h0 : c0;
      for (int64_t b = 0; b < g.batch; ++b) {
        const int64_t last = g.row(b, g.step_at(g.steps - 1), n);
        for (int64_t j = 0; j < n; ++j) {
          final_state[b * n + j] =
              g.steps > 0 ? sequence[last + j] : (initial ? initial[b * n + j] : T{0});
        }
      }
    }
  });
}

// Note [Backward through time]
// Back through the steps in the opposite order: at each, the output's
// gradient is grad_output's plus what the next step sent back through h,
// dh = dR_(next) W_hh (and for gru dh z besides); lstm's cell gradient is
// what the next step sent through c, dc f. The row pass turns them into dP_t
// (the gradient of projected, the op's first output) and dR_t, the
// gradient of R_t + b_hh, which is dP_t but for gru's candidate. Then
//   grad_weight_hh = sum_t dR_t^T h_(t-1),  grad_bias_hh = sum_t dR_t,
// and what is left in dh (and dc) after the first step is the initial
// states' gradient.
template <RecurrentCell kCell>
void recurrence_backward_kernel(const KernelContext& c) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const RecurrenceBackwardInputs at(cell, c.attrs);
  const RecurrenceGeometry g = geometry_of(cell, c.inputs[1].shape(), c.inputs[0].shape(), c.attrs);
  onednn::OneThread one_thread(multiply_adds(c.inputs[0].shape(), c.inputs[1].shape()) <=
                               onednn::kOneThreadWork);
  visit_floating(c.inputs[1].dtype(), [&]<class T>() {
    const auto input = [&](size_t k) { return c.inputs[k].data<T>(); };
    const bool saved_gradients = at.initial > at.saved_grads;
    const T* w_hh = input(0);
    const T* y = input(1);
    const T* saved_state = cell.saved() > 0 ? input(at.saved) : nullptr;
    const T* gates = cell.saved() > 0 ? input(at.saved + 1) : nullptr;
    const T* grad_y = input(at.grads);
    const T* grad_saved_state = saved_gradients ? input(at.saved_grads) : nullptr;
    const T* grad_gates = saved_gradients ? input(at.saved_grads + 1) : nullptr;
    const T* h0 = g.initial_h ? input(at.initial) : nullptr;
    const T* c0 = g.initial_c ? input(at.initial + (g.initial_h ? 1 : 0)) : nullptr;
    T* d_projected = c.outputs[0].data<T>();
    T* d_w = c.outputs[1].data<T>();
    T* d_b = c.outputs[2].data<T>();
    const int64_t n = g.hidden, width = g.width;
    // dR: d_projected itself but for gru.
    std::vector<T> gru_d_recurrent(
        kCell == RecurrentCell::kGru ? static_cast<size_t>(g.batch * g.steps * width) : 0);
    T* d_recurrent = kCell == RecurrentCell::kGru ? gru_d_recurrent.data() : d_projected;
    std::vector<T> dh(input(at.grads + 1), input(at.grads + 1) + g.batch * n);
    std::vector<T> dc;
    if (cell.states == 2) dc.assign(input(at.grads + 2), input(at.grads + 2) + g.batch * n);
    std::vector<T> dh_total(static_cast<size_t>(g.batch * n));
    const std::vector<T> zeros(static_cast<size_t>(width), T{0});  // A zero state or gradient.
    for (int64_t s = g.steps - 1; s >= 0; --s) {
      const int64_t t = g.step_at(s);
      parallel_for(g.batch, rows_per_thread(n), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t row = b * g.steps + t, state_at = row * n, gates_at = row * width;
          T* d_h = dh_total.data() + b * n;
          for (int64_t j = 0; j < n; ++j) d_h[j] = dh[b * n + j] + grad_y[state_at + j];
          const int64_t prev_at = g.row(b, s > 0 ? g.before(s) : 0, n);
          if constexpr (kCell == RecurrentCell::kRnnTanh) {
            rnn_tanh_backward_row(y + state_at, d_h, d_projected + gates_at, n);
          } else if constexpr (kCell == RecurrentCell::kRnnRelu) {
            rnn_relu_backward_row(y + state_at, d_h, d_projected + gates_at, n);
          } else if constexpr (kCell == RecurrentCell::kLstm) {
            const T* c_prev = s > 0 ? saved_state + prev_at : (c0 ? c0 + b * n : zeros.data());
            if (grad_saved_state != nullptr) {  // c_t's own gradient joins what flows into it.
              for (int64_t j = 0; j < n; ++j) dc[b * n + j] += grad_saved_state[state_at + j];
            }
            lstm_backward_row(gates + gates_at, saved_state + state_at, c_prev, d_h,
                              dc.data() + b * n, d_projected + gates_at, n);
            if (grad_gates != nullptr) {
              add_activated_gates_gradient(gates + gates_at, grad_gates + gates_at,
                                           d_projected + gates_at, n);
            }
          } else {
            const T* h_prev = s > 0 ? y + prev_at : (h0 ? h0 + b * n : zeros.data());
            gru_backward_row(gates + gates_at, saved_state + state_at, h_prev, d_h,
                             grad_gates ? grad_gates + gates_at : zeros.data(),
                             grad_saved_state ? grad_saved_state + state_at : zeros.data(),
                             d_projected + gates_at, d_recurrent + gates_at, dh.data() + b * n, n);
          }
        }
      });
      // What flows back to h_(t-1) through W_hh: dR_t W_hh (added to gru's
      // dh z).
      cpu::gemm(false, false, g.batch, n, width, T{1}, d_recurrent + t * width, g.steps * width,
                w_hh, n, kCell == RecurrentCell::kGru ? T{1} : T{0}, dh.data(), n);
    }
    // grad_weight_hh: per sample, the steps that had a previous output in
    // one product (rows of dR and of the outputs one step apart), then h0's.
    std::fill(d_w, d_w + width * n, T{0});
    if (g.steps > 1) {
      const int64_t first_gate = g.reverse ? 0 : 1, first_prev = g.reverse ? 1 : 0;
      for (int64_t b = 0; b < g.batch; ++b) {
        cpu::gemm(true, false, width, n, g.steps - 1, T{1},
                  d_recurrent + g.row(b, first_gate, width), width, y + g.row(b, first_prev, n), n,
                  T{1}, d_w, n);
      }
    }
    if (h0 != nullptr && g.steps > 0) {
      cpu::gemm(true, false, width, n, g.batch, T{1}, d_recurrent + g.step_at(0) * width,
                g.steps * width, h0, n, T{1}, d_w, n);
    }
    // grad_bias_hh: the column sums of dR, as the product of a row of ones
    // and dR (the GEMM runs on every core).
    const std::vector<T> ones(static_cast<size_t>(g.batch * g.steps), T{1});
    cpu::gemm(false, false, 1, width, g.batch * g.steps, T{1}, ones.data(), g.batch * g.steps,
              d_recurrent, width, T{0}, d_b, width);
    int output = 3;
    if (g.initial_h) std::copy(dh.begin(), dh.end(), c.outputs[output++].data<T>());
    if (g.initial_c) std::copy(dc.begin(), dc.end(), c.outputs[output].data<T>());
  });
}

// The saved outputs pass their gradients on only when a graph used them;
// the layers never do.
template <RecurrentCell kCell>
std::vector<Tensor> recurrence_gradient(const GradContext& c) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const size_t first_saved = 1 + cell.states, outputs = first_saved + cell.saved();
  bool any = false, saved = false;
  for (size_t k = 0; k < outputs; ++k) {
    any = any || c.grad_outputs[k].defined();
    saved = saved || (k >= first_saved && c.grad_outputs[k].defined());
  }
  if (!any) return std::vector<Tensor>(c.inputs.size());
  const auto grad = [&](size_t k) {
    return c.grad_outputs[k].defined() ? c.grad_outputs[k] : zeros_like(c.outputs[k]);
  };
  std::vector<Tensor> args = {c.inputs[1], c.outputs[0]};
  for (size_t k = first_saved; k < outputs; ++k) args.push_back(c.outputs[k]);
  for (size_t k = 0; k < first_saved; ++k) args.push_back(grad(k));
  for (size_t k = first_saved; saved && k < outputs; ++k) args.push_back(grad(k));
  for (size_t k = 3; k < c.inputs.size(); ++k) args.push_back(c.inputs[k]);
  Attrs attrs = c.attrs;
  attrs.set("saved_gradients", saved);
  return nested_call(op_names(kCell).backward, args, attrs);
}

std::vector<AttrSpec> recurrence_attrs(const RecurrenceLayout& cell) {
  std::vector<AttrSpec> attrs = {optional("reverse", false), optional("initial_h", false)};
  if (cell.states == 2) attrs.push_back(optional("initial_c", false));
  return attrs;
}

template <RecurrentCell kCell>
void register_cell(Registry& registry, const char* what) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const std::string states = cell.states == 2 ? "[, h0][, c0]" : "[, h0]";
  const std::string finals = cell.states == 2 ? "h_n, c_n" : "h_n";
  const std::string saved = cell.saved() > 0 ? str_cat(", ", cell.saved_state, ", gates") : "";
  const std::string saved_grads =
      cell.saved() > 0 ? str_cat("[, grad_", cell.saved_state, ", grad_gates]") : "";
  const std::string final_grads = cell.states == 2 ? "grad_h_n, grad_c_n" : "grad_h_n";
  const std::string state_grads = cell.states == 2 ? "[, grad_h0][, grad_c0]" : "[, grad_h0]";
  registry.add({.name = op_names(kCell).forward,
                .num_inputs = kVariadic,
                .num_outputs = 1 + cell.states + cell.saved(),
                .attrs = recurrence_attrs(cell),
                .infer = infer_recurrence<kCell>,
                .cpu = recurrence_kernel<kCell>,
                .gradient = recurrence_gradient<kCell>,
                .doc = str_cat("(projected, weight_hh, bias_hh", states, ") -> (output, ", finals,
                               saved, "): one ", what, " layer and direction over the sequence"),
                .uses_all_cores = true,
                .one_core = recurrence_on_one_core,
                .work = recurrence_work});
  std::vector<AttrSpec> backward_attrs = recurrence_attrs(cell);
  backward_attrs.push_back(optional("saved_gradients", false));
  registry.add(
      {.name = op_names(kCell).backward,
       .num_inputs = kVariadic,
       .num_outputs = kVariadic,
       .attrs = backward_attrs,
       .infer = infer_recurrence_backward<kCell>,
       .cpu = recurrence_backward_kernel<kCell>,
       .differentiable = false,
       .doc = str_cat("gradient of ", op_names(kCell).forward, " through time: (weight_hh, output",
                      saved, ", grad_output, ", final_grads, saved_grads, states,
                      ") -> grad_projected, grad_weight_hh, grad_bias_hh", state_grads),
       .uses_all_cores = true,
       .one_core = recurrence_backward_on_one_core,
       .work = recurrence_backward_work});
}

}  // namespace

void register_recurrence_ops(Registry& registry) {
  register_cell<RecurrentCell::kRnnTanh>(registry, "Elman RNN (tanh)");
  register_cell<RecurrentCell::kRnnRelu>(registry, "Elman RNN (relu)");
  register_cell<RecurrentCell::kLstm>(registry, "LSTM");
  register_cell<RecurrentCell::kGru>(registry, "GRU");
}

const OpDef& rnn_tanh_op() { return op_def<"rnn_tanh">(); }
const OpDef& rnn_relu_op() { return op_def<"rnn_relu">(); }
const OpDef& lstm_op() { return op_def<"lstm">(); }
const OpDef& gru_op() { return op_def<"gru">(); }

}  // namespace tandem::kernels
