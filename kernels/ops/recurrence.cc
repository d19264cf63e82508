// lstm: one LSTM layer in one direction over a whole sequence, and
// lstm_backward, its gradient through time. The input projection x W_ih^T +
// b_ih is not part of it (a linear op before it computes every step's at
// once, and its gradient is linear's); the op runs the recurrence, one
// sgemm per step for h W_hh^T and one pass over the gates:
//   G_t = projected_t + h_(t-1) W_hh^T + b_hh       [batch, 4 * hidden]
//   i, f, g, o = sigmoid, sigmoid, tanh, sigmoid of G_t's quarters
//   c_t = f c_(t-1) + i g,   h_t = o tanh(c_t)
// (torch's gate order and equations), h_(-1) = h0 and c_(-1) = c0 when the
// call gives them, zeros otherwise; `reverse` runs from the last step to
// the first. Outputs: every h_t [batch, seq, hidden], the final h and c,
// and, saved for the backward, every c_t and the activated gates [batch,
// seq, 4 * hidden].
#include <algorithm>
#include <cstdint>
#include <limits>
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

// A call's sizes and which initial states it gives.
struct LstmGeometry {
  int64_t batch = 0, steps = 0, hidden = 0;
  bool reverse = false;
  bool initial_h = false, initial_c = false;

  int64_t gates() const { return 4 * hidden; }
  // The position in the sequence of the s-th step taken.
  int64_t step_at(int64_t s) const { return reverse ? steps - 1 - s : s; }
  // The position of the step taken before it (s > 0).
  int64_t before(int64_t s) const { return reverse ? steps - s : s - 1; }
};

LstmGeometry lstm_geometry(const Shape& projected, const Shape& weight_hh, const Shape& bias_hh,
                           const Attrs& attrs) {
  TANDEM_CHECK(projected.rank() == 3 && projected[2] % 4 == 0,
               "projected must be [batch, seq, 4 * hidden], got ", projected.to_string());
  LstmGeometry g{.batch = projected[0],
                 .steps = projected[1],
                 .hidden = projected[2] / 4,
                 .reverse = attrs.get_bool("reverse"),
                 .initial_h = attrs.get_bool("initial_h"),
                 .initial_c = attrs.get_bool("initial_c")};
  TANDEM_CHECK(
      weight_hh == Shape({g.gates(), g.hidden}),
      "weight_hh must be [4 * hidden, hidden] = ", Shape({g.gates(), g.hidden}).to_string(),
      " for projected ", projected.to_string(), ", got ", weight_hh.to_string());
  TANDEM_CHECK(bias_hh == Shape({g.gates()}), "bias_hh must be [", g.gates(), "], got ",
               bias_hh.to_string());
  return g;
}

// How many inputs follow the fixed ones: h0 and c0 where the attributes say.
size_t initial_states(const Attrs& attrs) {
  return (attrs.get_bool("initial_h") ? 1 : 0) + (attrs.get_bool("initial_c") ? 1 : 0);
}

void check_states(absl::Span<const TensorMeta> states, const LstmGeometry& g, DType dtype) {
  const Shape want{g.batch, g.hidden};
  for (const TensorMeta& s : states) {
    TANDEM_CHECK(s.shape == want && s.dtype == dtype, "an initial state must be ",
                 dtype_name(dtype), " [batch, hidden] = ", want.to_string(), ", got ",
                 dtype_name(s.dtype), " ", s.shape.to_string());
  }
}

// (projected, weight_hh, bias_hh[, h0][, c0]) -> (output, h_n, c_n, cells, gates).
TensorMetas infer_lstm(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const size_t states = initial_states(attrs);
  TANDEM_CHECK(in.size() == 3 + states, "takes projected, weight_hh, bias_hh and ", states,
               " initial states (as initial_h and initial_c say), got ", in.size(), " inputs");
  check_floating("projected", in[0].dtype);
  for (int k = 1; k < 3; ++k) {
    TANDEM_CHECK(in[k].dtype == in[0].dtype, "weight_hh and bias_hh must be ",
                 dtype_name(in[0].dtype), " as projected is, got ", dtype_name(in[k].dtype));
  }
  const LstmGeometry g = lstm_geometry(in[0].shape, in[1].shape, in[2].shape, attrs);
  check_states(in.subspan(3), g, in[0].dtype);
  const DType t = in[0].dtype;
  const Shape sequence{g.batch, g.steps, g.hidden}, state{g.batch, g.hidden};
  return {{sequence, t}, {state, t}, {state, t}, {sequence, t}, {in[0].shape, t}};
}

// How many gradients lstm_backward takes: those of output, h_n and c_n, and
// with saved_gradients those of cells and gates.
size_t output_gradients(const Attrs& attrs) { return attrs.get_bool("saved_gradients") ? 5 : 3; }

// (weight_hh, output, cells, gates, grad_output, grad_h_n, grad_c_n[,
// grad_cells, grad_gates][, h0][, c0]) -> (grad_projected, grad_weight_hh,
// grad_bias_hh[, grad_h0][, grad_c0]).
TensorMetas infer_lstm_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  const size_t states = initial_states(attrs), grads = output_gradients(attrs);
  TANDEM_CHECK(in.size() == 4 + grads + states, "takes weight_hh, output, cells, gates, ", grads,
               " of their gradients and ", states,
               " initial states (as saved_gradients, initial_h and initial_c say), got ", in.size(),
               " inputs");
  check_floating("gates", in[3].dtype);
  const DType t = in[3].dtype;
  const Shape& gates = in[3].shape;
  const LstmGeometry g =
      lstm_geometry(gates, in[0].shape, Shape({gates.rank() == 3 ? gates[2] : 0}), attrs);
  const Shape sequence{g.batch, g.steps, g.hidden}, state{g.batch, g.hidden};
  // Inputs 1, 2 and from 4 on are as the forward's outputs 0, 3, 0, 1, 2, 3, 4.
  const Shape want[] = {{}, sequence, sequence, gates, sequence, state, state, sequence, gates};
  const char* names[] = {"",
                         "output",
                         "cells",
                         "gates",
                         "the gradient of output",
                         "the gradient of h_n",
                         "the gradient of c_n",
                         "the gradient of cells",
                         "the gradient of gates"};
  for (size_t k = 1; k < 4 + grads; ++k) {
    const TensorMeta& got = in[k];
    TANDEM_CHECK(got.shape == want[k] && got.dtype == t, names[k], " must be ", dtype_name(t), " ",
                 want[k].to_string(), ", got ", dtype_name(got.dtype), " ", got.shape.to_string());
  }
  check_states(in.subspan(4 + grads), g, t);
  TensorMetas out = {{gates, t}, in[0], {Shape({g.gates()}), t}};
  for (size_t k = 0; k < states; ++k) out.push_back({state, t});
  return out;
}

// The gate passes (Note [Row passes in two builds] in kernels/cpu/fast_exp.h).

// One row of one step: gates [4 * hidden] hold G_t and become i, f, g, o;
// writes c_t and h_t. c_prev is null for a zero state. The pointers never
// overlap (restrict), and the null test is outside the loops, so that GCC
// vectorizes them.
template <class T>
TANDEM_VECTOR_CLONES void lstm_cell_row(T* __restrict gates, const T* __restrict c_prev,
                                        T* __restrict c, T* __restrict h, int64_t hidden) {
  T* i = gates;
  T* f = gates + hidden;
  T* g = gates + 2 * hidden;
  T* o = gates + 3 * hidden;
  for (int64_t j = 0; j < hidden; ++j) {
    i[j] = cpu::fast_sigmoid(i[j]);
    f[j] = cpu::fast_sigmoid(f[j]);
    g[j] = cpu::fast_tanh(g[j]);
    o[j] = cpu::fast_sigmoid(o[j]);
  }
  if (c_prev != nullptr) {
    for (int64_t j = 0; j < hidden; ++j) c[j] = f[j] * c_prev[j] + i[j] * g[j];
  } else {
    for (int64_t j = 0; j < hidden; ++j) c[j] = i[j] * g[j];
  }
  for (int64_t j = 0; j < hidden; ++j) h[j] = o[j] * cpu::fast_tanh(c[j]);
}

// The same row backward (Note [LSTM backward]): from the step's output
// gradient dh (already summed with what the next step sent back) and the
// cell gradient dc, writes the gradient of G_t into d_gates and leaves in
// dc what flows to c_(t-1). c_prev is a row of zeros for a zero state.
template <class T>
TANDEM_VECTOR_CLONES void lstm_cell_backward_row(const T* __restrict gates, const T* __restrict c,
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

// The part of the gates' gradient that comes from the activated gates'
// own gradient (lstm's saved output, which a graph may use): each quarter's
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

// Samples per thread in a step's gate pass: below some 4096 elements each,
// waking the other threads costs more than the pass (the OpenMP team is
// awake already from the step's product).
int64_t rows_per_thread(int64_t hidden) { return std::max<int64_t>(1, 4096 / hidden); }

// The recurrence's multiply-adds, batch * seq * 4 * hidden * hidden, from
// weight_hh [4 * hidden, hidden] and the output [batch, seq, hidden]
// (saturating: it only steers threading). At most onednn::kOneThreadWork of
// them run on one thread (Note [Small primitives on one thread]).
int64_t multiply_adds(const Shape& weight_hh, const Shape& output) {
  int64_t work;
  if (__builtin_mul_overflow(output.numel() / std::max<int64_t>(weight_hh[1], 1), weight_hh.numel(),
                             &work)) {
    return std::numeric_limits<int64_t>::max();
  }
  return work;
}
int64_t lstm_work(const CallShapes& shapes) {
  return multiply_adds(*shapes.inputs[1], *shapes.outputs[0]);
}
bool lstm_on_one_core(const CallShapes& shapes) {
  return lstm_work(shapes) <= onednn::kOneThreadWork;
}
int64_t lstm_backward_work(const CallShapes& shapes) {
  return multiply_adds(*shapes.inputs[0], *shapes.inputs[1]);
}
bool lstm_backward_on_one_core(const CallShapes& shapes) {
  return lstm_backward_work(shapes) <= onednn::kOneThreadWork;
}

void lstm_kernel(const KernelContext& c) {
  const LstmGeometry g =
      lstm_geometry(c.inputs[0].shape(), c.inputs[1].shape(), c.inputs[2].shape(), c.attrs);
  onednn::OneThread one_thread(multiply_adds(c.inputs[1].shape(), c.outputs[0].shape()) <=
                               onednn::kOneThreadWork);
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const T* w_hh = c.inputs[1].data<T>();
    const T* b_hh = c.inputs[2].data<T>();
    const T* h0 = g.initial_h ? c.inputs[3].data<T>() : nullptr;
    const T* c0 = g.initial_c ? c.inputs[3 + (g.initial_h ? 1 : 0)].data<T>() : nullptr;
    T* y = c.outputs[0].data<T>();
    T* cells = c.outputs[3].data<T>();
    T* gates = c.outputs[4].data<T>();
    const int64_t n = g.hidden, width = g.gates();
    // G starts as projected + b_hh, for every step at once.
    const T* projected = c.inputs[0].data<T>();
    parallel_for(g.batch * g.steps, rows_per_thread(width), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        for (int64_t k = 0; k < width; ++k) {
          gates[row * width + k] = projected[row * width + k] + b_hh[k];
        }
      }
    });
    for (int64_t s = 0; s < g.steps; ++s) {
      const int64_t t = g.step_at(s);
      T* step_gates = gates + t * width;  // Row b at b * steps * width.
      // h_(t-1) W_hh^T, from the previous step's output or h0.
      const T* h_prev = s > 0 ? y + g.before(s) * n : h0;
      const int64_t h_stride = s > 0 ? g.steps * n : n;
      if (h_prev != nullptr) {
        cpu::gemm(false, true, g.batch, width, n, T{1}, h_prev, h_stride, w_hh, n, T{1}, step_gates,
                  g.steps * width);
      }
      parallel_for(g.batch, rows_per_thread(n), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t at = (b * g.steps + t) * n;
          const T* c_prev =
              s > 0 ? cells + (b * g.steps + g.before(s)) * n : (c0 ? c0 + b * n : nullptr);
          lstm_cell_row(gates + (b * g.steps + t) * width, c_prev, cells + at, y + at, n);
        }
      });
    }
    // The final states: those of the last step taken, or the initial ones.
    T* h_n = c.outputs[1].data<T>();
    T* c_n = c.outputs[2].data<T>();
    for (int64_t b = 0; b < g.batch; ++b) {
      const int64_t last = (b * g.steps + g.step_at(g.steps - 1)) * n;
      for (int64_t j = 0; j < n; ++j) {
        h_n[b * n + j] = g.steps > 0 ? y[last + j] : (h0 ? h0[b * n + j] : T{0});
        c_n[b * n + j] = g.steps > 0 ? cells[last + j] : (c0 ? c0[b * n + j] : T{0});
      }
    }
  });
}

// Note [LSTM backward]
// Back through the steps in the opposite order: at each, the output's
// gradient is grad_output's plus what the next step sent back through h,
// dh = dG_(next) W_hh; the cell's is what the next step sent through c,
// dc f. The row pass turns them into dG_t (the gradient of projected, the
// op's first output); then
//   grad_weight_hh = sum_t dG_t^T h_(t-1),  grad_bias_hh = sum_t dG_t,
// and what is left in dh and dc after the first step is the initial
// states' gradient.
void lstm_backward_kernel(const KernelContext& c) {
  const Tensor& gates_t = c.inputs[3];
  const int64_t width = gates_t.shape()[2];
  const LstmGeometry g =
      lstm_geometry(gates_t.shape(), c.inputs[0].shape(), Shape({width}), c.attrs);
  onednn::OneThread one_thread(multiply_adds(c.inputs[0].shape(), c.inputs[1].shape()) <=
                               onednn::kOneThreadWork);
  visit_floating(gates_t.dtype(), [&]<class T>() {
    const T* w_hh = c.inputs[0].data<T>();
    const T* y = c.inputs[1].data<T>();
    const T* cells = c.inputs[2].data<T>();
    const T* gates = gates_t.data<T>();
    const T* grad_y = c.inputs[4].data<T>();
    const bool saved = c.attrs.get_bool("saved_gradients");
    const T* grad_cells = saved ? c.inputs[7].data<T>() : nullptr;
    const T* grad_gates = saved ? c.inputs[8].data<T>() : nullptr;
    const size_t first_state = 4 + output_gradients(c.attrs);
    const T* h0 = g.initial_h ? c.inputs[first_state].data<T>() : nullptr;
    const T* c0 = g.initial_c ? c.inputs[first_state + (g.initial_h ? 1 : 0)].data<T>() : nullptr;
    T* d_gates = c.outputs[0].data<T>();
    T* d_w = c.outputs[1].data<T>();
    T* d_b = c.outputs[2].data<T>();
    const int64_t n = g.hidden;
    std::vector<T> dh(c.inputs[5].data<T>(), c.inputs[5].data<T>() + g.batch * n);
    std::vector<T> dc(c.inputs[6].data<T>(), c.inputs[6].data<T>() + g.batch * n);
    std::vector<T> dh_total(static_cast<size_t>(g.batch * n));
    const std::vector<T> zero_state(c0 == nullptr ? static_cast<size_t>(n) : 0, T{0});
    for (int64_t s = g.steps - 1; s >= 0; --s) {
      const int64_t t = g.step_at(s);
      parallel_for(g.batch, rows_per_thread(n), [&](int64_t begin, int64_t end) {
        for (int64_t b = begin; b < end; ++b) {
          const int64_t at = (b * g.steps + t) * n;
          for (int64_t j = 0; j < n; ++j) dh_total[b * n + j] = dh[b * n + j] + grad_y[at + j];
          const T* c_prev = s > 0 ? cells + (b * g.steps + g.before(s)) * n
                                  : (c0 ? c0 + b * n : zero_state.data());
          if (grad_cells != nullptr) {  // c_t's own gradient joins what flows into it.
            for (int64_t j = 0; j < n; ++j) dc[b * n + j] += grad_cells[at + j];
          }
          const int64_t gates_at = (b * g.steps + t) * width;
          lstm_cell_backward_row(gates + gates_at, cells + at, c_prev, dh_total.data() + b * n,
                                 dc.data() + b * n, d_gates + gates_at, n);
          if (grad_gates != nullptr) {
            add_activated_gates_gradient(gates + gates_at, grad_gates + gates_at,
                                         d_gates + gates_at, n);
          }
        }
      });
      // What flows back to h_(t-1): dG_t W_hh.
      cpu::gemm(false, false, g.batch, n, width, T{1}, d_gates + t * width, g.steps * width, w_hh,
                n, T{0}, dh.data(), n);
    }
    // grad_weight_hh: per sample, the steps that had a previous output in
    // one product (rows of dG and of the outputs one step apart), then h0's.
    std::fill(d_w, d_w + width * n, T{0});
    if (g.steps > 1) {
      const int64_t first_gate = g.reverse ? 0 : 1, first_prev = g.reverse ? 1 : 0;
      for (int64_t b = 0; b < g.batch; ++b) {
        cpu::gemm(true, false, width, n, g.steps - 1, T{1},
                  d_gates + (b * g.steps + first_gate) * width, width,
                  y + (b * g.steps + first_prev) * n, n, T{1}, d_w, n);
      }
    }
    if (h0 != nullptr && g.steps > 0) {
      cpu::gemm(true, false, width, n, g.batch, T{1}, d_gates + g.step_at(0) * width,
                g.steps * width, h0, n, T{1}, d_w, n);
    }
    // grad_bias_hh: the column sums of dG, as the product of a row of ones
    // and dG (the GEMM runs on every core).
    const std::vector<T> ones(static_cast<size_t>(g.batch * g.steps), T{1});
    cpu::gemm(false, false, 1, width, g.batch * g.steps, T{1}, ones.data(), g.batch * g.steps,
              d_gates, width, T{0}, d_b, width);
    int output = 3;
    if (g.initial_h) std::copy(dh.begin(), dh.end(), c.outputs[output++].data<T>());
    if (g.initial_c) std::copy(dc.begin(), dc.end(), c.outputs[output].data<T>());
  });
}

// The saved outputs (cells, gates) pass their gradients on only when a
// graph used them; the layers never do.
std::vector<Tensor> lstm_gradient(const GradContext& c) {
  bool any = false, saved = false;
  for (size_t k = 0; k < 5; ++k) {
    any = any || c.grad_outputs[k].defined();
    saved = saved || (k >= 3 && c.grad_outputs[k].defined());
  }
  if (!any) return std::vector<Tensor>(c.inputs.size());
  const auto grad = [&](size_t k) {
    return c.grad_outputs[k].defined() ? c.grad_outputs[k] : zeros_like(c.outputs[k]);
  };
  std::vector<Tensor> args = {c.inputs[1], c.outputs[0], c.outputs[3], c.outputs[4],
                              grad(0),     grad(1),      grad(2)};
  if (saved) {
    args.push_back(grad(3));
    args.push_back(grad(4));
  }
  for (size_t k = 3; k < c.inputs.size(); ++k) args.push_back(c.inputs[k]);
  Attrs attrs = c.attrs;
  attrs.set("saved_gradients", saved);
  return nested_call("lstm_backward", args, attrs);
}

std::vector<AttrSpec> lstm_attrs() {
  return {optional("reverse", false), optional("initial_h", false), optional("initial_c", false)};
}

std::vector<AttrSpec> lstm_backward_attrs() {
  std::vector<AttrSpec> attrs = lstm_attrs();
  attrs.push_back(optional("saved_gradients", false));
  return attrs;
}

}  // namespace

void register_recurrence_ops(Registry& registry) {
  registry.add({.name = "lstm",
                .num_inputs = kVariadic,
                .num_outputs = 5,
                .attrs = lstm_attrs(),
                .infer = infer_lstm,
                .cpu = lstm_kernel,
                .gradient = lstm_gradient,
                .doc = "(projected, weight_hh, bias_hh[, h0][, c0]) -> (output, h_n, c_n, cells, "
                       "gates): one LSTM layer and direction over the sequence",
                .uses_all_cores = true,
                .one_core = lstm_on_one_core,
                .work = lstm_work});
  registry.add({.name = "lstm_backward",
                .num_inputs = kVariadic,
                .num_outputs = kVariadic,
                .attrs = lstm_backward_attrs(),
                .infer = infer_lstm_backward,
                .cpu = lstm_backward_kernel,
                .differentiable = false,
                .doc = "gradient of lstm through time: (weight_hh, output, cells, gates, "
                       "grad_output, grad_h_n, grad_c_n[, grad_cells, grad_gates][, h0][, c0]) "
                       "-> grad_projected, grad_weight_hh, grad_bias_hh[, grad_h0][, grad_c0]",
                .uses_all_cores = true,
                .one_core = lstm_backward_on_one_core,
                .work = lstm_backward_work});
}

}  // namespace tandem::kernels
