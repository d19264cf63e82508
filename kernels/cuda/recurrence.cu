// The CUDA kernels of kernels/ops/recurrence.cc: rnn_tanh, rnn_relu, lstm,
// gru and their backwards. One launch per step for the recurrent product
// R_t = h_(t-1) W_hh^T (a thread per element, its dot product in double)
// and one for the gates, in the CPU's equations (libm's exp and tanh where
// the CPU uses its vectorized ones, so float results agree to rounding).
// The weights' gradients are summed over every step by one thread per
// weight after the loop. cuBLAS for the per-step products is the next step
// when a GPU workload needs speed.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/recurrence.h"

namespace tandem::kernels {
namespace cuda {
namespace {

__device__ double sigmoid(double x) { return 1 / (1 + exp(-x)); }

// recurrent[b, k] = sum_j h_prev[b, j] w_hh[k, j] (h_prev null: a zero
// state).
template <class T>
struct RecurrentProduct {
  RecurrenceGeometry z;
  const T* h_prev;
  int64_t h_stride;  // Between rows b of h_prev.
  const T* w_hh;
  T* recurrent;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.width, k = e - b * z.width;
    double sum = 0;
    if (h_prev != nullptr) {
      for (int64_t j = 0; j < z.hidden; ++j) {
        sum += static_cast<double>(h_prev[b * h_stride + j]) *
               static_cast<double>(w_hh[k * z.hidden + j]);
      }
    }
    recurrent[e] = static_cast<T>(sum);
  }
};

// One unit j of sample b at step t.
template <class T, RecurrentCell kCell>
struct Step {
  RecurrenceGeometry z;
  int64_t t;
  const T* projected;
  const T* recurrent;
  const T* b_hh;
  const T* prev;  // h_(t-1) for gru, c_(t-1) for lstm; null: a zero state.
  int64_t prev_stride;
  T* gates;
  T* saved_state;
  T* y;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden, n = z.hidden;
    const T* p = projected + z.row(b, t, z.width);
    const T* r = recurrent + b * z.width;
    const auto pre = [&](int64_t k) {
      return static_cast<double>(p[k]) + static_cast<double>(r[k]) + static_cast<double>(b_hh[k]);
    };
    const double previous = prev != nullptr ? static_cast<double>(prev[b * prev_stride + j]) : 0;
    T* g = gates != nullptr ? gates + z.row(b, t, z.width) : nullptr;
    double h;
    if constexpr (kCell == RecurrentCell::kRnnTanh) {
      h = tanh(pre(j));
    } else if constexpr (kCell == RecurrentCell::kRnnRelu) {
      const double v = pre(j);
      h = v > 0 ? v : (v != v ? v : 0);
    } else if constexpr (kCell == RecurrentCell::kLstm) {
      const double i = sigmoid(pre(j)), f = sigmoid(pre(n + j)), c_new = tanh(pre(2 * n + j));
      const double o = sigmoid(pre(3 * n + j));
      g[j] = static_cast<T>(i), g[n + j] = static_cast<T>(f);
      g[2 * n + j] = static_cast<T>(c_new), g[3 * n + j] = static_cast<T>(o);
      const double c = f * previous + i * c_new;
      saved_state[z.row(b, t, n) + j] = static_cast<T>(c);
      h = o * tanh(c);
    } else {
      const double reset = sigmoid(pre(j)), update = sigmoid(pre(n + j));
      const double recurrent_new =
          static_cast<double>(r[2 * n + j]) + static_cast<double>(b_hh[2 * n + j]);
      const double candidate = tanh(static_cast<double>(p[2 * n + j]) + reset * recurrent_new);
      g[j] = static_cast<T>(reset), g[n + j] = static_cast<T>(update);
      g[2 * n + j] = static_cast<T>(candidate);
      saved_state[z.row(b, t, n) + j] = static_cast<T>(recurrent_new);
      h = candidate + update * (previous - candidate);
    }
    y[z.row(b, t, n) + j] = static_cast<T>(h);
  }
};

// The same unit backward (Note [Backward through time] in
// kernels/ops/recurrence.cc): writes rows of d_projected and d_recurrent
// (the same tensor but for gru), and for gru the part of dh that bypasses
// W_hh.
template <class T, RecurrentCell kCell>
struct StepBackward {
  RecurrenceGeometry z;
  int64_t t;
  const T* y;
  const T* saved_state;
  const T* gates;
  const T* grad_y;
  const T* grad_saved_state;  // Null when the call has no gradient for them.
  const T* grad_gates;
  const T* prev;  // h_(t-1) for gru, c_(t-1) for lstm; null: a zero state.
  int64_t prev_stride;
  T* dh;
  T* dc;
  T* d_projected;
  T* d_recurrent;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden, n = z.hidden;
    const int64_t at = z.row(b, t, n) + j;
    const double d_h = static_cast<double>(dh[b * n + j]) + static_cast<double>(grad_y[at]);
    const double previous = prev != nullptr ? static_cast<double>(prev[b * prev_stride + j]) : 0;
    // The saved outputs' own gradients, where given.
    const T* gg = grad_gates != nullptr ? grad_gates + z.row(b, t, z.width) : nullptr;
    const auto own = [&](int64_t q) { return gg != nullptr ? static_cast<double>(gg[q]) : 0.0; };
    const double own_state =
        grad_saved_state != nullptr ? static_cast<double>(grad_saved_state[at]) : 0.0;
    const T* g = gates != nullptr ? gates + z.row(b, t, z.width) : nullptr;
    T* d = d_projected + z.row(b, t, z.width);
    if constexpr (kCell == RecurrentCell::kRnnTanh) {
      const double h = y[at];
      d[j] = static_cast<T>(d_h * (1 - h * h));
    } else if constexpr (kCell == RecurrentCell::kRnnRelu) {
      d[j] = static_cast<T>(y[at] > T{0} ? d_h : 0.0);
    } else if constexpr (kCell == RecurrentCell::kLstm) {
      const double i = g[j], f = g[n + j], c_new = g[2 * n + j], o = g[3 * n + j];
      const double tanh_c = tanh(static_cast<double>(saved_state[at]));
      const double d_c =
          static_cast<double>(dc[b * n + j]) + d_h * o * (1 - tanh_c * tanh_c) + own_state;
      d[j] = static_cast<T>((d_c * c_new + own(j)) * i * (1 - i));
      d[n + j] = static_cast<T>((d_c * previous + own(n + j)) * f * (1 - f));
      d[2 * n + j] = static_cast<T>((d_c * i + own(2 * n + j)) * (1 - c_new * c_new));
      d[3 * n + j] = static_cast<T>((d_h * tanh_c + own(3 * n + j)) * o * (1 - o));
      dc[b * n + j] = static_cast<T>(d_c * f);
    } else {
      const double reset = g[j], update = g[n + j], candidate = g[2 * n + j];
      const double d_candidate =
          (d_h * (1 - update) + own(2 * n + j)) * (1 - candidate * candidate);
      const double d_update = (d_h * (previous - candidate) + own(n + j)) * update * (1 - update);
      const double d_reset =
          (d_candidate * static_cast<double>(saved_state[at]) + own(j)) * reset * (1 - reset);
      T* dr = d_recurrent + z.row(b, t, z.width);
      d[j] = dr[j] = static_cast<T>(d_reset);
      d[n + j] = dr[n + j] = static_cast<T>(d_update);
      d[2 * n + j] = static_cast<T>(d_candidate);
      dr[2 * n + j] = static_cast<T>(d_candidate * reset + own_state);
      dh[b * n + j] = static_cast<T>(d_h * update);
    }
  }
};

// dh[b, j] = (gru: dh[b, j] +) sum_k d_recurrent[b, t, k] w_hh[k, j].
template <class T>
struct BackThroughWeights {
  RecurrenceGeometry z;
  int64_t t;
  bool add;
  const T* d_recurrent;
  const T* w_hh;
  T* dh;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden;
    double sum = add ? static_cast<double>(dh[e]) : 0;
    for (int64_t k = 0; k < z.width; ++k) {
      sum += static_cast<double>(d_recurrent[z.row(b, t, z.width) + k]) *
             static_cast<double>(w_hh[k * z.hidden + j]);
    }
    dh[e] = static_cast<T>(sum);
  }
};

// d_w[k, j] = sum over steps with a previous h of d_recurrent[b, t, k]
// h_prev[b, j]; d_b[k] = sum of d_recurrent[., ., k].
template <class T>
struct WeightGradients {
  RecurrenceGeometry z;
  const T* d_recurrent;
  const T* y;
  const T* h0;  // Null without one.
  T* d_w;
  T* d_b;
  __device__ void operator()(int64_t e) const {
    const int64_t k = e / z.hidden, j = e - k * z.hidden;
    double sum = 0, bias = 0;
    for (int64_t b = 0; b < z.batch; ++b) {
      for (int64_t s = 0; s < z.steps; ++s) {
        const double d = d_recurrent[z.row(b, z.step_at(s), z.width) + k];
        if (j == 0) bias += d;
        const T* h =
            s > 0 ? y + z.row(b, z.before(s), z.hidden) : (h0 ? h0 + b * z.hidden : nullptr);
        if (h != nullptr) sum += d * static_cast<double>(h[j]);
      }
    }
    d_w[e] = static_cast<T>(sum);
    if (j == 0) d_b[k] = static_cast<T>(bias);
  }
};

// Copies rows (b, step t) of a [batch, seq, hidden] tensor into [batch,
// hidden] `out`, or `initial` when there are no steps (zeros without).
template <class T>
void copy_final(cudaStream_t stream, const RecurrenceGeometry& g, const T* sequence,
                const T* initial, const Tensor& out) {
  if (g.steps == 0 && initial == nullptr) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream));
    return;
  }
  const T* from = g.steps == 0 ? initial : sequence + g.step_at(g.steps - 1) * g.hidden;
  const int64_t pitch = g.steps == 0 ? g.hidden : g.steps * g.hidden;
  TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(out.raw_data(), g.hidden * sizeof(T), from, pitch * sizeof(T),
                                      g.hidden * sizeof(T), g.batch, cudaMemcpyDeviceToDevice,
                                      stream));
}

template <RecurrentCell kCell>
void recurrence_kernel(const KernelContext& c) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const Tensor& projected = c.inputs[0];
  const Shape& shape = projected.shape();
  const RecurrenceGeometry g(cell, Shape({shape[0], shape[1], shape[2] / cell.gates}), c.attrs);
  cudaStream_t stream = stream_of(c);
  const Tensor recurrent = Tensor::empty({g.batch, g.width}, projected.dtype(), c.run.device);
  visit_floating(projected.dtype(), [&]<class T>() {
    const T* h0 = g.initial_h ? c.inputs[3].data<T>() : nullptr;
    const T* c0 = g.initial_c ? c.inputs[g.initial_h ? 4 : 3].data<T>() : nullptr;
    T* y = c.outputs[0].data<T>();
    const int saved_at = 1 + cell.states;
    T* saved_state = cell.saved() > 0 ? c.outputs[saved_at].data<T>() : nullptr;
    T* gates = cell.saved() > 0 ? c.outputs[saved_at + 1].data<T>() : nullptr;
    for (int64_t s = 0; s < g.steps; ++s) {
      const int64_t t = g.step_at(s);
      const T* h_prev = s > 0 ? y + g.before(s) * g.hidden : h0;
      const T* c_prev = s > 0 && saved_state ? saved_state + g.before(s) * g.hidden : c0;
      const int64_t stride = s > 0 ? g.steps * g.hidden : g.hidden;
      for_each(stream, g.batch * g.width,
               RecurrentProduct<T>{g, h_prev, stride, c.inputs[1].data<T>(), recurrent.data<T>()});
      for_each(stream, g.batch * g.hidden,
               Step<T, kCell>{g, t, projected.data<T>(), recurrent.data<T>(), c.inputs[2].data<T>(),
                              kCell == RecurrentCell::kLstm ? c_prev : h_prev, stride, gates,
                              saved_state, y});
    }
    copy_final(stream, g, y, h0, c.outputs[1]);
    if (cell.states == 2) copy_final(stream, g, saved_state, c0, c.outputs[2]);
  });
}

template <RecurrentCell kCell>
void recurrence_backward_kernel(const KernelContext& c) {
  static constexpr RecurrenceLayout cell = recurrence_layout(kCell);
  const RecurrenceBackwardInputs at(cell, c.attrs);
  const RecurrenceGeometry g(cell, c.inputs[1].shape(), c.attrs);
  const DType dtype = c.inputs[1].dtype();
  cudaStream_t stream = stream_of(c);
  const auto copy_of = [&](const Tensor& t) {
    Tensor copy = Tensor::empty(t.shape(), dtype, c.run.device);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(copy.raw_data(), t.raw_data(), t.nbytes(),
                                      cudaMemcpyDeviceToDevice, stream));
    return copy;
  };
  const Tensor dh = copy_of(c.inputs[at.grads + 1]);
  const Tensor dc = cell.states == 2 ? copy_of(c.inputs[at.grads + 2]) : Tensor();
  const Tensor gru_d_recurrent = kCell == RecurrentCell::kGru
                                     ? Tensor::empty(c.outputs[0].shape(), dtype, c.run.device)
                                     : Tensor();
  visit_floating(dtype, [&]<class T>() {
    const auto input = [&](size_t k) { return c.inputs[k].data<T>(); };
    const bool saved_gradients = at.initial > at.saved_grads;
    const T* y = input(1);
    const T* saved_state = cell.saved() > 0 ? input(at.saved) : nullptr;
    const T* gates = cell.saved() > 0 ? input(at.saved + 1) : nullptr;
    const T* grad_saved_state = saved_gradients ? input(at.saved_grads) : nullptr;
    const T* grad_gates = saved_gradients ? input(at.saved_grads + 1) : nullptr;
    const T* h0 = g.initial_h ? input(at.initial) : nullptr;
    const T* c0 = g.initial_c ? input(at.initial + (g.initial_h ? 1 : 0)) : nullptr;
    T* d_projected = c.outputs[0].data<T>();
    T* d_recurrent = kCell == RecurrentCell::kGru ? gru_d_recurrent.data<T>() : d_projected;
    T* dc_data = cell.states == 2 ? dc.data<T>() : nullptr;
    for (int64_t s = g.steps - 1; s >= 0; --s) {
      const int64_t t = g.step_at(s);
      const T* h_prev = s > 0 ? y + g.before(s) * g.hidden : h0;
      const T* c_prev = s > 0 && saved_state ? saved_state + g.before(s) * g.hidden : c0;
      const int64_t stride = s > 0 ? g.steps * g.hidden : g.hidden;
      for_each(
          stream, g.batch * g.hidden,
          StepBackward<T, kCell>{g, t, y, saved_state, gates, input(at.grads), grad_saved_state,
                                 grad_gates, kCell == RecurrentCell::kLstm ? c_prev : h_prev,
                                 stride, dh.data<T>(), dc_data, d_projected, d_recurrent});
      for_each(stream, g.batch * g.hidden,
               BackThroughWeights<T>{g, t, kCell == RecurrentCell::kGru, d_recurrent, input(0),
                                     dh.data<T>()});
    }
    for_each(
        stream, g.width * g.hidden,
        WeightGradients<T>{g, d_recurrent, y, h0, c.outputs[1].data<T>(), c.outputs[2].data<T>()});
    int output = 3;
    for (const Tensor* state : {g.initial_h ? &dh : nullptr, g.initial_c ? &dc : nullptr}) {
      if (state == nullptr) continue;
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(c.outputs[output++].raw_data(), state->raw_data(),
                                        state->nbytes(), cudaMemcpyDeviceToDevice, stream));
    }
  });
}

}  // namespace
}  // namespace cuda

void register_recurrence_cuda_kernels(Registry& registry) {
  using cuda::recurrence_backward_kernel;
  using cuda::recurrence_kernel;
  registry.set_cuda_kernel("rnn_tanh", recurrence_kernel<RecurrentCell::kRnnTanh>);
  registry.set_cuda_kernel("rnn_tanh_backward",
                           recurrence_backward_kernel<RecurrentCell::kRnnTanh>);
  registry.set_cuda_kernel("rnn_relu", recurrence_kernel<RecurrentCell::kRnnRelu>);
  registry.set_cuda_kernel("rnn_relu_backward",
                           recurrence_backward_kernel<RecurrentCell::kRnnRelu>);
  registry.set_cuda_kernel("lstm", recurrence_kernel<RecurrentCell::kLstm>);
  registry.set_cuda_kernel("lstm_backward", recurrence_backward_kernel<RecurrentCell::kLstm>);
  registry.set_cuda_kernel("gru", recurrence_kernel<RecurrentCell::kGru>);
  registry.set_cuda_kernel("gru_backward", recurrence_backward_kernel<RecurrentCell::kGru>);
}

}  // namespace tandem::kernels
