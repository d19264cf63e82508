// The CUDA kernels of kernels/ops/recurrence.cc: lstm and lstm_backward,
// one launch per step for the recurrent product (a thread per element of
// h W_hh^T, its dot product in double) and one for the gates, in the CPU's
// equations (libm's exp and tanh where the CPU uses its vectorized ones, so
// float results agree to rounding). The weights' gradients are summed over
// every step by one thread per weight after the loop. cuBLAS for the
// per-step products is the next step when a GPU workload needs speed.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"

namespace tandem::kernels {
namespace cuda {
namespace {

struct Sizes {
  int64_t batch, steps, hidden;
  bool reverse;
  __device__ int64_t width() const { return 4 * hidden; }
  // Element (b, t) of a [batch, seq, features] tensor.
  __device__ int64_t row(int64_t b, int64_t t, int64_t features) const {
    return (b * steps + t) * features;
  }
};

Sizes sizes_of(const Shape& gates, const Attrs& attrs) {
  return {gates[0], gates[1], gates[2] / 4, attrs.get_bool("reverse")};
}

__device__ double sigmoid(double x) { return 1 / (1 + exp(-x)); }

// gates[b, t, k] += b_hh[k] + sum_j h_prev[b, j] w_hh[k, j] (h_prev null:
// a zero state).
template <class T>
struct AddRecurrent {
  Sizes z;
  int64_t t;
  const T* h_prev;
  int64_t h_stride;  // Between rows b of h_prev.
  const T* w_hh;
  const T* b_hh;
  T* gates;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.width(), k = e - b * z.width();
    double sum = static_cast<double>(b_hh[k]);
    if (h_prev != nullptr) {
      for (int64_t j = 0; j < z.hidden; ++j) {
        sum += static_cast<double>(h_prev[b * h_stride + j]) *
               static_cast<double>(w_hh[k * z.hidden + j]);
      }
    }
    T& g = gates[z.row(b, t, z.width()) + k];
    g = static_cast<T>(static_cast<double>(g) + sum);
  }
};

template <class T>
struct Cell {
  Sizes z;
  int64_t t;
  const T* c_prev;  // Null: a zero state.
  int64_t c_stride;
  T* gates;
  T* cells;
  T* y;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden, n = z.hidden;
    T* g = gates + z.row(b, t, z.width());
    const double i = sigmoid(g[j]), f = sigmoid(g[n + j]),
                 c_new = tanh(static_cast<double>(g[2 * n + j]));
    const double o = sigmoid(g[3 * n + j]);
    g[j] = static_cast<T>(i), g[n + j] = static_cast<T>(f);
    g[2 * n + j] = static_cast<T>(c_new), g[3 * n + j] = static_cast<T>(o);
    const double previous = c_prev != nullptr ? static_cast<double>(c_prev[b * c_stride + j]) : 0;
    const double c = f * previous + i * c_new;
    cells[z.row(b, t, n) + j] = static_cast<T>(c);
    y[z.row(b, t, n) + j] = static_cast<T>(o * tanh(c));
  }
};

template <class T>
struct CellBackward {
  Sizes z;
  int64_t t;
  const T* gates;
  const T* cells;
  const T* c_prev;
  int64_t c_stride;
  const T* grad_y;
  const T* grad_cells;  // Null when the call has no gradient for them.
  const T* grad_gates;
  const T* dh;
  T* dc;
  T* d_gates;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden, n = z.hidden;
    const T* g = gates + z.row(b, t, z.width());
    const double i = g[j], f = g[n + j], c_new = g[2 * n + j], o = g[3 * n + j];
    const double tanh_c = tanh(static_cast<double>(cells[z.row(b, t, n) + j]));
    const double d_h = static_cast<double>(dh[b * n + j]) + grad_y[z.row(b, t, n) + j];
    double d_c = static_cast<double>(dc[b * n + j]) + d_h * o * (1 - tanh_c * tanh_c);
    if (grad_cells != nullptr) d_c += static_cast<double>(grad_cells[z.row(b, t, n) + j]);
    // The activated gates' own gradients, where given.
    const T* gg = grad_gates != nullptr ? grad_gates + z.row(b, t, z.width()) : nullptr;
    const auto own = [&](int64_t q) { return gg != nullptr ? static_cast<double>(gg[q]) : 0.0; };
    const double previous = c_prev != nullptr ? static_cast<double>(c_prev[b * c_stride + j]) : 0;
    T* d = d_gates + z.row(b, t, z.width());
    d[j] = static_cast<T>((d_c * c_new + own(j)) * i * (1 - i));
    d[n + j] = static_cast<T>((d_c * previous + own(n + j)) * f * (1 - f));
    d[2 * n + j] = static_cast<T>((d_c * i + own(2 * n + j)) * (1 - c_new * c_new));
    d[3 * n + j] = static_cast<T>((d_h * tanh_c + own(3 * n + j)) * o * (1 - o));
    dc[b * n + j] = static_cast<T>(d_c * f);
  }
};

// dh[b, j] = sum_k d_gates[b, t, k] w_hh[k, j].
template <class T>
struct BackThroughWeights {
  Sizes z;
  int64_t t;
  const T* d_gates;
  const T* w_hh;
  T* dh;
  __device__ void operator()(int64_t e) const {
    const int64_t b = e / z.hidden, j = e - b * z.hidden;
    double sum = 0;
    for (int64_t k = 0; k < z.width(); ++k) {
      sum += static_cast<double>(d_gates[z.row(b, t, z.width()) + k]) *
             static_cast<double>(w_hh[k * z.hidden + j]);
    }
    dh[e] = static_cast<T>(sum);
  }
};

// d_w[k, j] = sum over steps with a previous h of d_gates[b, t, k] h_prev[b, j];
// d_b[k] = sum of d_gates[., ., k].
template <class T>
struct WeightGradients {
  Sizes z;
  const T* d_gates;
  const T* y;
  const T* h0;  // Null without one.
  T* d_w;
  T* d_b;
  __device__ void operator()(int64_t e) const {
    const int64_t k = e / z.hidden, j = e - k * z.hidden;
    double sum = 0, bias = 0;
    for (int64_t b = 0; b < z.batch; ++b) {
      for (int64_t s = 0; s < z.steps; ++s) {
        const int64_t t = z.reverse ? z.steps - 1 - s : s;
        const double d = d_gates[z.row(b, t, z.width()) + k];
        if (j == 0) bias += d;
        const int64_t before = z.reverse ? t + 1 : t - 1;
        const T* h = s > 0 ? y + z.row(b, before, z.hidden) : (h0 ? h0 + b * z.hidden : nullptr);
        if (h != nullptr) sum += d * static_cast<double>(h[j]);
      }
    }
    d_w[e] = static_cast<T>(sum);
    if (j == 0) d_b[k] = static_cast<T>(bias);
  }
};

void lstm_kernel(const KernelContext& c) {
  const Tensor& projected = c.inputs[0];
  const Sizes z = sizes_of(projected.shape(), c.attrs);
  const bool initial_h = c.attrs.get_bool("initial_h"), initial_c = c.attrs.get_bool("initial_c");
  cudaStream_t stream = stream_of(c);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(c.outputs[4].raw_data(), projected.raw_data(),
                                    projected.nbytes(), cudaMemcpyDeviceToDevice, stream));
  visit_floating(projected.dtype(), [&]<class T>() {
    const T* h0 = initial_h ? c.inputs[3].data<T>() : nullptr;
    const T* c0 = initial_c ? c.inputs[initial_h ? 4 : 3].data<T>() : nullptr;
    T* y = c.outputs[0].data<T>();
    T* cells = c.outputs[3].data<T>();
    T* gates = c.outputs[4].data<T>();
    for (int64_t s = 0; s < z.steps; ++s) {
      const int64_t t = z.reverse ? z.steps - 1 - s : s, before = z.reverse ? t + 1 : t - 1;
      const T* h_prev = s > 0 ? y + before * z.hidden : h0;
      const T* c_prev = s > 0 ? cells + before * z.hidden : c0;
      const int64_t stride = s > 0 ? z.steps * z.hidden : z.hidden;
      for_each(stream, z.batch * 4 * z.hidden,
               AddRecurrent<T>{z, t, h_prev, stride, c.inputs[1].data<T>(), c.inputs[2].data<T>(),
                               gates});
      for_each(stream, z.batch * z.hidden, Cell<T>{z, t, c_prev, stride, gates, cells, y});
    }
    // The final states: the last step's, or the initial ones (zeros without).
    for (int k : {1, 2}) {
      const Tensor& out = c.outputs[k];
      const T* initial = k == 1 ? h0 : c0;
      if (z.steps == 0 && initial == nullptr) {
        TANDEM_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, out.nbytes(), stream));
        continue;
      }
      const T* from =
          z.steps == 0 ? initial : (k == 1 ? y : cells) + (z.reverse ? 0 : z.steps - 1) * z.hidden;
      const int64_t pitch = z.steps == 0 ? z.hidden : z.steps * z.hidden;
      TANDEM_CUDA_CHECK(cudaMemcpy2DAsync(out.raw_data(), z.hidden * sizeof(T), from,
                                          pitch * sizeof(T), z.hidden * sizeof(T), z.batch,
                                          cudaMemcpyDeviceToDevice, stream));
    }
  });
}

void lstm_backward_kernel(const KernelContext& c) {
  const Tensor& gates_t = c.inputs[3];
  const Sizes z = sizes_of(gates_t.shape(), c.attrs);
  const bool initial_h = c.attrs.get_bool("initial_h"), initial_c = c.attrs.get_bool("initial_c");
  cudaStream_t stream = stream_of(c);
  const Tensor dh = Tensor::empty(c.inputs[5].shape(), gates_t.dtype(), c.run.device);
  const Tensor dc = Tensor::empty(c.inputs[6].shape(), gates_t.dtype(), c.run.device);
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dh.raw_data(), c.inputs[5].raw_data(), dh.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream));
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dc.raw_data(), c.inputs[6].raw_data(), dc.nbytes(),
                                    cudaMemcpyDeviceToDevice, stream));
  visit_floating(gates_t.dtype(), [&]<class T>() {
    const T* w_hh = c.inputs[0].data<T>();
    const T* y = c.inputs[1].data<T>();
    const T* cells = c.inputs[2].data<T>();
    const bool saved = c.attrs.get_bool("saved_gradients");
    const T* grad_cells = saved ? c.inputs[7].data<T>() : nullptr;
    const T* grad_gates = saved ? c.inputs[8].data<T>() : nullptr;
    const size_t first_state = saved ? 9 : 7;
    const T* h0 = initial_h ? c.inputs[first_state].data<T>() : nullptr;
    const T* c0 = initial_c ? c.inputs[first_state + (initial_h ? 1 : 0)].data<T>() : nullptr;
    T* d_gates = c.outputs[0].data<T>();
    for (int64_t s = z.steps - 1; s >= 0; --s) {
      const int64_t t = z.reverse ? z.steps - 1 - s : s, before = z.reverse ? t + 1 : t - 1;
      const T* c_prev = s > 0 ? cells + before * z.hidden : c0;
      const int64_t stride = s > 0 ? z.steps * z.hidden : z.hidden;
      for_each(
          stream, z.batch * z.hidden,
          CellBackward<T>{z, t, gates_t.data<T>(), cells, c_prev, stride, c.inputs[4].data<T>(),
                          grad_cells, grad_gates, dh.data<T>(), dc.data<T>(), d_gates});
      for_each(stream, z.batch * z.hidden,
               BackThroughWeights<T>{z, t, d_gates, w_hh, dh.data<T>()});
    }
    for_each(stream, 4 * z.hidden * z.hidden,
             WeightGradients<T>{z, d_gates, y, h0, c.outputs[1].data<T>(), c.outputs[2].data<T>()});
    int output = 3;
    for (const Tensor* state : {initial_h ? &dh : nullptr, initial_c ? &dc : nullptr}) {
      if (state == nullptr) continue;
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(c.outputs[output++].raw_data(), state->raw_data(),
                                        state->nbytes(), cudaMemcpyDeviceToDevice, stream));
    }
  });
}

}  // namespace
}  // namespace cuda

void register_recurrence_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("lstm", cuda::lstm_kernel);
  registry.set_cuda_kernel("lstm_backward", cuda::lstm_backward_kernel);
}

}  // namespace tandem::kernels
