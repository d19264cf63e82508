// CUDA kernels of kernels/ops/norm.cc: batch_norm, layer_norm and their
// backward ops, with the formulas and two-pass statistics of the CPU kernels
// (read their comments there). A batch_norm channel or a layer_norm row is a
// column of a ReduceLayout folded by one group of threads (Note [Column
// blocks] in column_reduce.cuh), which then writes the column's outputs;
// sums accumulate in double.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/launch.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace cuda {
namespace {

struct SumPair {
  double first, second;
};

// Folds two sums in one pass; terms(offset, r) gives an element's two terms.
template <class Terms>
struct PairSumOf {
  using Acc = SumPair;
  Terms terms;
  __device__ Acc identity() const { return {0, 0}; }
  __device__ Acc map(int64_t offset, int64_t r) const { return terms(offset, r); }
  __device__ Acc combine(Acc a, Acc b) const { return {a.first + b.first, a.second + b.second}; }
};

// x [N, C, ...]: one column per channel.
ReduceLayout channel_columns(const Shape& x) {
  int64_t spatial = 1;
  for (int i = 2; i < x.rank(); ++i) spatial *= x[i];
  const int64_t dims[] = {x[0], x[1], spatial};
  const int axes[] = {0, 2};
  return make_reduce_layout(dims, axes);
}

template <class T>
struct BatchNormArgs {
  const T *x, *gamma, *beta, *running_mean, *running_var;
  T *y, *mean, *var;
};

template <class T>
__global__ void batch_norm_channels(ReduceLayout l, bool training, double eps, BatchNormArgs<T> a) {
  for_each_column(l, [&](const Column& col) {
    const int64_t ch = col.index;
    T mu{}, sigma2{};
    if (training) {
      // Biased, over the deviations from the mean, as on the CPU.
      const double m = static_cast<double>(l.num_reduced);
      mu = static_cast<T>(column_reduce(l, col, SumOf<T>{a.x}) / m);
      sigma2 = static_cast<T>(column_reduce(l, col, SquaredDeviationOf<T>{a.x, mu}) / m);
    } else if (col.active) {
      mu = a.running_mean[ch];
      sigma2 = a.running_var[ch];
    }
    if (!col.active) return;
    if (threadIdx.y == 0) {
      a.mean[ch] = mu;
      a.var[ch] = sigma2;
    }
    // y = (x - mean) rstd gamma + beta = x scale + shift.
    const double scale = a.gamma[ch] / std::sqrt(static_cast<double>(sigma2) + eps);
    const T ts = static_cast<T>(scale), tb = static_cast<T>(a.beta[ch] - mu * scale);
    for_each_reduced(l, col, [&](int64_t offset, int64_t) { a.y[offset] = a.x[offset] * ts + tb; });
  });
}

void batch_norm_kernel(const KernelContext& c) {
  const ReduceLayout l = channel_columns(c.inputs[0].shape());
  if (l.num_kept == 0) return;
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    BatchNormArgs<T> args{c.inputs[0].data<T>(),  c.inputs[1].data<T>(), c.inputs[2].data<T>(),
                          c.inputs[3].data<T>(),  c.inputs[4].data<T>(), c.outputs[0].data<T>(),
                          c.outputs[1].data<T>(), c.outputs[2].data<T>()};
    batch_norm_channels<<<l.grid(), l.block(), 0, stream_of(c)>>>(l, c.attrs.get_bool("training"),
                                                                  c.attrs.get_float("eps"), args);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

// (g, g (x - mean)) of one element.
template <class T>
struct BatchGradTerms {
  const T *x, *g;
  T mu;
  __device__ SumPair operator()(int64_t offset, int64_t) const {
    const double g_value = static_cast<double>(g[offset]);
    return {g_value, g_value * (static_cast<double>(x[offset]) - static_cast<double>(mu))};
  }
};

template <class T>
struct BatchNormBackwardArgs {
  const T *x, *gamma, *mean, *var, *g, *g_mean, *g_var;
  T *g_x, *g_gamma, *g_beta, *g_running_mean, *g_running_var;
};

// The formulas of batch_norm_backward_kernel in norm.cc, with
// grad_x = scale g + k (x - mean) + b.
template <class T>
__global__ void batch_norm_backward_channels(ReduceLayout l, bool training, double eps,
                                             BatchNormBackwardArgs<T> a) {
  for_each_column(l, [&](const Column& col) {
    const int64_t ch = col.index;
    const T mu = col.active ? a.mean[ch] : T{};
    const SumPair sums = column_reduce(l, col, PairSumOf<BatchGradTerms<T>>{{a.x, a.g, mu}});
    if (!col.active) return;
    const double m = static_cast<double>(l.num_reduced);
    const double rstd = 1 / std::sqrt(static_cast<double>(a.var[ch]) + eps);
    const double sum_g = sums.first, sum_g_xhat = sums.second * rstd;
    const double scale = a.gamma[ch] * rstd;
    double k = 0, b = 0;
    if (training) {
      k = (2 * a.g_var[ch] - scale * rstd * sum_g_xhat) / m;
      b = (a.g_mean[ch] - scale * sum_g) / m;
    }
    if (threadIdx.y == 0) {
      a.g_gamma[ch] = static_cast<T>(sum_g_xhat);
      a.g_beta[ch] = static_cast<T>(sum_g);
      a.g_running_mean[ch] = training ? T{0} : static_cast<T>(a.g_mean[ch] - scale * sum_g);
      a.g_running_var[ch] =
          training ? T{0} : static_cast<T>(a.g_var[ch] - 0.5 * scale * rstd * sum_g_xhat);
    }
    const T ts = static_cast<T>(scale), tk = static_cast<T>(k), tb = static_cast<T>(b);
    for_each_reduced(l, col, [&](int64_t offset, int64_t) {
      a.g_x[offset] = ts * a.g[offset] + tk * (a.x[offset] - mu) + tb;
    });
  });
}

void batch_norm_backward_kernel(const KernelContext& c) {
  const ReduceLayout l = channel_columns(c.inputs[0].shape());
  if (l.num_kept == 0) return;
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    BatchNormBackwardArgs<T> args{
        c.inputs[0].data<T>(),  c.inputs[1].data<T>(),  c.inputs[2].data<T>(),
        c.inputs[3].data<T>(),  c.inputs[4].data<T>(),  c.inputs[5].data<T>(),
        c.inputs[6].data<T>(),  c.outputs[0].data<T>(), c.outputs[1].data<T>(),
        c.outputs[2].data<T>(), c.outputs[3].data<T>(), c.outputs[4].data<T>()};
    batch_norm_backward_channels<<<l.grid(), l.block(), 0, stream_of(c)>>>(
        l, c.attrs.get_bool("training"), c.attrs.get_float("eps"), args);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

// x seen around its trailing normalized_axes axes: one column per row
// (reducing the trailing axes) or one per normalized element (reducing the
// leading ones). Either way r is an element's row-major index within the
// reduced axes, which for rows is its index into gamma and beta.
ReduceLayout layer_norm_columns(const KernelContext& c, bool rows) {
  const Shape& x = c.inputs[0].shape();
  // Inference checked 1 <= normalized_axes <= rank, so this cannot narrow.
  const int first = x.rank() - static_cast<int>(c.attrs.get_int("normalized_axes"));
  std::vector<int> axes(rows ? x.rank() - first : first);
  std::iota(axes.begin(), axes.end(), rows ? first : 0);
  return make_reduce_layout(x.dims(), axes);
}

struct RowStats {
  double mean, rstd;
};

template <class T>
__device__ RowStats row_stats(const ReduceLayout& l, const Column& col, const T* x, double eps) {
  const double d = static_cast<double>(l.num_reduced);
  const double mean = column_reduce(l, col, SumOf<T>{x}) / d;
  const double squares = column_reduce(l, col, SquaredDeviationOf<T>{x, mean});
  return {mean, 1 / std::sqrt(squares / d + eps)};
}

template <class T>
__global__ void layer_norm_rows(ReduceLayout l, double eps, const T* x, const T* gamma,
                                const T* beta, T* y) {
  for_each_column(l, [&](const Column& col) {
    const RowStats s = row_stats(l, col, x, eps);
    for_each_reduced(l, col, [&](int64_t offset, int64_t j) {
      y[offset] = static_cast<T>((x[offset] - s.mean) * s.rstd * gamma[j] + beta[j]);
    });
  });
}

void layer_norm_kernel(const KernelContext& c) {
  const ReduceLayout l = layer_norm_columns(c, /*rows=*/true);
  if (c.inputs[0].numel() == 0) return;
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    layer_norm_rows<<<l.grid(), l.block(), 0, stream_of(c)>>>(
        l, c.attrs.get_float("eps"), c.inputs[0].data<T>(), c.inputs[1].data<T>(),
        c.inputs[2].data<T>(), c.outputs[0].data<T>());
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

// (gy, gy xhat) of one element of a row, gy = g gamma.
template <class T>
struct RowGradTerms {
  const T *x, *g, *gamma;
  RowStats s;
  __device__ SumPair operator()(int64_t offset, int64_t j) const {
    const double gy = static_cast<double>(g[offset]) * static_cast<double>(gamma[j]);
    return {gy, gy * (x[offset] - s.mean) * s.rstd};
  }
};

// grad_x = rstd (gy - mean(gy) - xhat mean(gy xhat)) per row; also keeps
// each row's (mean, rstd) for the gamma and beta gradients.
template <class T>
__global__ void layer_norm_backward_rows(ReduceLayout l, double eps, const T* x, const T* gamma,
                                         const T* g, T* g_x, RowStats* stats) {
  for_each_column(l, [&](const Column& col) {
    const RowStats s = row_stats(l, col, x, eps);
    const SumPair sums = column_reduce(l, col, PairSumOf<RowGradTerms<T>>{{x, g, gamma, s}});
    if (!col.active) return;
    if (threadIdx.y == 0) stats[col.index] = s;
    const double d = static_cast<double>(l.num_reduced);
    const double mean_gy = sums.first / d, mean_gy_xhat = sums.second / d;
    for_each_reduced(l, col, [&](int64_t offset, int64_t j) {
      const double xhat = (x[offset] - s.mean) * s.rstd;
      const double gy = static_cast<double>(g[offset]) * static_cast<double>(gamma[j]);
      g_x[offset] = static_cast<T>(s.rstd * (gy - mean_gy - xhat * mean_gy_xhat));
    });
  });
}

// (g xhat, g) of one element, r its row.
template <class T>
struct ParamGradTerms {
  const T *x, *g;
  const RowStats* stats;
  __device__ SumPair operator()(int64_t offset, int64_t r) const {
    const double g_value = static_cast<double>(g[offset]);
    return {g_value * (x[offset] - stats[r].mean) * stats[r].rstd, g_value};
  }
};

// grad_gamma = sum(g xhat), grad_beta = sum g over the rows.
template <class T>
__global__ void layer_norm_param_grads(ReduceLayout l, const T* x, const T* g,
                                       const RowStats* stats, T* g_gamma, T* g_beta) {
  for_each_column(l, [&](const Column& col) {
    const SumPair sums = column_reduce(l, col, PairSumOf<ParamGradTerms<T>>{{x, g, stats}});
    if (!col.active || threadIdx.y != 0) return;
    g_gamma[col.index] = static_cast<T>(sums.first);
    g_beta[col.index] = static_cast<T>(sums.second);
  });
}

void layer_norm_backward_kernel(const KernelContext& c) {
  const ReduceLayout rows = layer_norm_columns(c, /*rows=*/true);
  const ReduceLayout params = layer_norm_columns(c, /*rows=*/false);
  const double eps = c.attrs.get_float("eps");
  // Two doubles per row; kept alive until both launches are enqueued.
  const int64_t num_rows = c.inputs[0].numel() == 0 ? 0 : rows.num_kept;
  Tensor stats = Tensor::empty(Shape{num_rows, 2}, DType::kFloat64, c.run.device);
  RowStats* row_stats = reinterpret_cast<RowStats*>(stats.data<double>());
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const T *x = c.inputs[0].data<T>(), *gamma = c.inputs[1].data<T>();
    const T* g = c.inputs[2].data<T>();
    if (num_rows > 0) {
      layer_norm_backward_rows<<<rows.grid(), rows.block(), 0, stream_of(c)>>>(
          rows, eps, x, gamma, g, c.outputs[0].data<T>(), row_stats);
      TANDEM_CUDA_CHECK_LAUNCH();
    }
    if (params.num_kept > 0) {
      layer_norm_param_grads<<<params.grid(), params.block(), 0, stream_of(c)>>>(
          params, x, g, row_stats, c.outputs[1].data<T>(), c.outputs[2].data<T>());
      TANDEM_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace
}  // namespace cuda

void register_norm_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("batch_norm", cuda::batch_norm_kernel);
  registry.set_cuda_kernel("batch_norm_backward", cuda::batch_norm_backward_kernel);
  registry.set_cuda_kernel("layer_norm", cuda::layer_norm_kernel);
  registry.set_cuda_kernel("layer_norm_backward", cuda::layer_norm_backward_kernel);
}

}  // namespace tandem::kernels
