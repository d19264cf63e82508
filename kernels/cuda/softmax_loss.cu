// CUDA kernels of kernels/ops/softmax_loss.cc: softmax and log_softmax along
// one axis, cross_entropy, nll and mse, and the backward ops of the first
// two. A softmax row is a column of a ReduceLayout folded by one group of
// threads (Note [Column blocks] in column_reduce.cuh); sums accumulate in
// double, as on the CPU.
//
// Note [Targets out of range]
// The CPU kernels throw for a target outside [0, classes). A GPU kernel
// cannot throw, and checking on the host would wait for the targets; the
// sample's loss and gradient row are NaN instead, so a bad target shows in
// the result instead of reading out of bounds.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace cuda {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The sum of exp(x - max): logsumexp without overflow.
template <class T>
struct ExpSumOf {
  using Acc = double;
  const T* in;
  double max;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(int64_t offset, int64_t) const {
    return std::exp(static_cast<double>(in[offset]) - max);
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

template <class T, bool kLog>
__global__ void softmax_columns(ReduceLayout l, const T* x, T* y) {
  for_each_column(l, [&](const Column& col) {
    const double max = column_reduce(l, col, ExtremumOf<T, true>{x});
    const double sum = column_reduce(l, col, ExpSumOf<T>{x, max});
    const double log_sum = std::log(sum);
    for_each_reduced(l, col, [&](int64_t offset, int64_t) {
      const double shifted = static_cast<double>(x[offset]) - max;
      y[offset] = static_cast<T>(kLog ? shifted - log_sum : std::exp(shifted) / sum);
    });
  });
}

template <bool kLog>
void softmax_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  const ReduceLayout l = make_reduce_layout(x.shape().dims(), {axis});
  if (x.numel() == 0) return;
  visit_floating(x.dtype(), [&]<class T>() {
    softmax_columns<T, kLog>
        <<<l.grid(), l.block(), 0, stream_of(c)>>>(l, x.data<T>(), c.outputs[0].data<T>());
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

// Losses.

enum class Reduction { kMean, kSum, kNone };

// Inference has checked the name.
Reduction reduction_of(const Attrs& attrs) {
  const std::string& r = attrs.get_string("reduction");
  return r == "mean" ? Reduction::kMean : r == "sum" ? Reduction::kSum : Reduction::kNone;
}

__device__ bool in_range(int64_t label, int64_t classes) { return label >= 0 && label < classes; }

// The gradient of sample i's loss: g, or g / n for the mean.
template <class T>
__device__ double sample_grad(const T* grad, int64_t i, int64_t n, Reduction reduction) {
  if (reduction == Reduction::kNone) return static_cast<double>(grad[i]);
  const double g = static_cast<double>(grad[0]);
  return reduction == Reduction::kMean ? g / static_cast<double>(n) : g;
}

// Writes the op's output from per-sample losses (`per_sample` maps sample i
// at offset i): one column per sample for "none", else one column of all.
template <class T, class Op>
void reduce_losses(const KernelContext& c, int64_t samples, const Op& per_sample) {
  const Reduction reduction = reduction_of(c.attrs);
  const int64_t dims[] = {samples};
  const int all[] = {0};
  const ReduceLayout l = make_reduce_layout(
      dims, reduction == Reduction::kNone ? absl::Span<const int>() : absl::Span<const int>(all));
  launch_reduce(c, l, per_sample, Total<T>{reduction == Reduction::kMean}, c.outputs[0].data<T>());
}

// Rows of logits [N, C]: one column per sample.
ReduceLayout class_rows(const Tensor& scores) {
  return make_reduce_layout(scores.shape().dims(), {1});
}

// losses[i] = logsumexp(x_i) - (1 - e) x_i[t_i] - e/C sum_c x_i[c].
template <class T>
__global__ void cross_entropy_rows(ReduceLayout l, const T* x, const int64_t* target, double e,
                                   double* losses) {
  for_each_column(l, [&](const Column& col) {
    const double max = column_reduce(l, col, ExtremumOf<T, true>{x});
    const double sum = column_reduce(l, col, ExpSumOf<T>{x, max});
    const double total = column_reduce(l, col, SumOf<T>{x});
    if (!col.active || threadIdx.y != 0) return;
    const int64_t label = target[col.index], classes = l.num_reduced;
    losses[col.index] = in_range(label, classes)
                            ? max + std::log(sum) -
                                  (1 - e) * static_cast<double>(x[col.base + label]) -
                                  e / static_cast<double>(classes) * total
                            : kNaN;
  });
}

void cross_entropy_kernel(const KernelContext& c) {
  const Tensor &logits = c.inputs[0], &target = c.inputs[1];
  const int64_t n = logits.shape()[0];
  const ReduceLayout l = class_rows(logits);
  // Kept alive until the launches below are enqueued (the allocator reuses
  // blocks in stream order).
  Tensor losses = Tensor::empty(Shape{n}, DType::kFloat64, c.run.device);
  visit_floating(logits.dtype(), [&]<class T>() {
    if (n > 0) {
      cross_entropy_rows<<<l.grid(), l.block(), 0, stream_of(c)>>>(
          l, logits.data<T>(), target.data<int64_t>(), c.attrs.get_float("label_smoothing"),
          losses.data<double>());
      TANDEM_CUDA_CHECK_LAUNCH();
    }
    reduce_losses<T>(c, n, SumOf<double>{losses.data<double>()});
  });
}

// grad_x[i, c] = g_i (softmax(x_i)[c] - (1 - e) [c == t_i] - e / C).
template <class T>
__global__ void cross_entropy_backward_rows(ReduceLayout l, const T* x, const int64_t* target,
                                            const T* grad, Reduction reduction, double e,
                                            T* grad_x) {
  for_each_column(l, [&](const Column& col) {
    const double max = column_reduce(l, col, ExtremumOf<T, true>{x});
    const double sum = column_reduce(l, col, ExpSumOf<T>{x, max});
    if (!col.active) return;
    const int64_t label = target[col.index], classes = l.num_reduced;
    const bool valid = in_range(label, classes);
    const double g = sample_grad(grad, col.index, l.num_kept, reduction);
    for_each_reduced(l, col, [&](int64_t offset, int64_t j) {
      const double p = std::exp(static_cast<double>(x[offset]) - max) / sum;
      const double d = p - (j == label ? 1 - e : 0) - e / static_cast<double>(classes);
      grad_x[offset] = static_cast<T>(valid ? g * d : kNaN);
    });
  });
}

void cross_entropy_backward_kernel(const KernelContext& c) {
  const Tensor &logits = c.inputs[0], &target = c.inputs[1], &grad = c.inputs[2];
  const ReduceLayout l = class_rows(logits);
  if (logits.numel() == 0) return;
  visit_floating(logits.dtype(), [&]<class T>() {
    cross_entropy_backward_rows<<<l.grid(), l.block(), 0, stream_of(c)>>>(
        l, logits.data<T>(), target.data<int64_t>(), grad.data<T>(), reduction_of(c.attrs),
        c.attrs.get_float("label_smoothing"), c.outputs[0].data<T>());
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

// loss_i = -log_probs[i, t_i].
template <class T>
struct NllOf {
  using Acc = double;
  const T* log_probs;
  const int64_t* target;
  int64_t classes;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(int64_t i, int64_t) const {
    const int64_t label = target[i];
    return in_range(label, classes) ? -static_cast<double>(log_probs[i * classes + label]) : kNaN;
  }
  __device__ Acc combine(Acc a, Acc b) const { return a + b; }
};

void nll_kernel(const KernelContext& c) {
  const Tensor &log_probs = c.inputs[0], &target = c.inputs[1];
  visit_floating(log_probs.dtype(), [&]<class T>() {
    reduce_losses<T>(c, log_probs.shape()[0],
                     NllOf<T>{log_probs.data<T>(), target.data<int64_t>(), log_probs.shape()[1]});
  });
}

template <class T>
struct NllBackward {
  const int64_t* target;
  const T* grad;
  Reduction reduction;
  int64_t samples, classes;
  T* grad_log_probs;
  __device__ void operator()(int64_t k) const {
    const int64_t i = k / classes, label = target[i];
    const double value = !in_range(label, classes)  ? kNaN
                         : k - i * classes == label ? -sample_grad(grad, i, samples, reduction)
                                                    : 0.0;
    grad_log_probs[k] = static_cast<T>(value);
  }
};

void nll_backward_kernel(const KernelContext& c) {
  const Tensor &log_probs = c.inputs[0], &target = c.inputs[1], &grad = c.inputs[2];
  visit_floating(log_probs.dtype(), [&]<class T>() {
    for_each(stream_of(c), log_probs.numel(),
             NllBackward<T>{target.data<int64_t>(), grad.data<T>(), reduction_of(c.attrs),
                            log_probs.shape()[0], log_probs.shape()[1], c.outputs[0].data<T>()});
  });
}

template <class T>
struct SquaredErrorOf {
  using Acc = double;
  const T *a, *b;
  __device__ Acc identity() const { return 0; }
  __device__ Acc map(int64_t offset, int64_t) const {
    const double d = static_cast<double>(a[offset]) - static_cast<double>(b[offset]);
    return d * d;
  }
  __device__ Acc combine(Acc x, Acc y) const { return x + y; }
};

void mse_kernel(const KernelContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  visit_floating(a.dtype(), [&]<class T>() {
    reduce_losses<T>(c, a.numel(), SquaredErrorOf<T>{a.data<T>(), b.data<T>()});
  });
}

}  // namespace
}  // namespace cuda

void register_softmax_loss_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("softmax", cuda::softmax_kernel<false>);
  registry.set_cuda_kernel("log_softmax", cuda::softmax_kernel<true>);
  registry.set_cuda_kernel("cross_entropy", cuda::cross_entropy_kernel);
  registry.set_cuda_kernel("cross_entropy_backward", cuda::cross_entropy_backward_kernel);
  registry.set_cuda_kernel("nll", cuda::nll_kernel);
  registry.set_cuda_kernel("nll_backward", cuda::nll_backward_kernel);
  registry.set_cuda_kernel("mse", cuda::mse_kernel);
}

}  // namespace tandem::kernels
