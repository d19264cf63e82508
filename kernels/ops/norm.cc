// Normalization: batch_norm and layer_norm, with dedicated backward ops
// (batch_norm_backward, layer_norm_backward; not differentiable) that
// implement the exact gradient formulas.
//
// batch_norm(x [N, C, ...], gamma, beta, running_mean, running_var; all [C])
//   -> y, mean, var. In training, y is normalized with the batch's statistics
//   over every axis but 1, and mean/var are those statistics (var biased,
//   divided by the element count, as used for normalizing). In evaluation
//   (training = false), y uses the running statistics and mean/var are copies
//   of them. The op never updates the running statistics itself: the module
//   does, with its momentum, from these outputs (keeping the op pure, so
//   tracing and replay need no in-place state).
// layer_norm(x, gamma, beta) -> y, normalizing over the trailing
//   `normalized_axes` axes; gamma and beta have the shape of those axes.
//
// batch_norm and its backward are loops of our own for both float types
// (Note [Batch norm loops]). float32 layer_norm forward runs on oneDNN
// (layer_normalization with separate scale and shift); its backward and
// float64 are plain loops that accumulate in double.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/primitive_cache.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// x seen as [n, c, s]: s is the product of the spatial axes.
struct BatchView {
  int64_t n = 0, c = 0, s = 1;
  int64_t count() const { return n * s; }  // Elements per channel.
  int64_t at(int64_t i, int64_t ch, int64_t j) const { return (i * c + ch) * s + j; }
};

BatchView batch_view(const Shape& x) {
  BatchView v{x[0], x[1], 1};
  for (int i = 2; i < x.rank(); ++i) v.s *= x[i];
  return v;
}

double eps_of(const Attrs& attrs) {
  double eps = attrs.get_float("eps");
  TANDEM_CHECK(eps >= 0 && std::isfinite(eps), "eps must be a finite non-negative number, got ",
               eps);
  return eps;
}

void check_same_float(absl::Span<const TensorMeta> in, std::initializer_list<const char*> names) {
  check_floating(*names.begin(), in[0].dtype);
  size_t i = 0;
  for (const char* name : names) {
    TANDEM_CHECK(in[i].dtype == in[0].dtype, "dtype mismatch: ", name, " is ",
                 dtype_name(in[i].dtype), ", ", *names.begin(), " is ", dtype_name(in[0].dtype));
    ++i;
  }
}

TensorMetas infer_batch_norm(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in, {"x", "gamma", "beta", "running_mean", "running_var"});
  const Shape& x = in[0].shape;
  TANDEM_CHECK(x.rank() >= 2, "x must be [batch, channels, ...], got shape ", x.to_string());
  eps_of(attrs);
  const char* names[] = {"gamma", "beta", "running_mean", "running_var"};
  for (int i = 1; i <= 4; ++i) {
    TANDEM_CHECK(in[i].shape == Shape{x[1]}, names[i - 1], " must be [", x[1], "] for x of shape ",
                 x.to_string(), ", got shape ", in[i].shape.to_string());
  }
  // One value per channel has no variance to normalize by (PyTorch refuses
  // it too); y would be beta alone and the gradient of x zero.
  if (attrs.get_bool("training")) {
    TANDEM_CHECK(batch_view(x).count() > 1,
                 "expected more than 1 value per channel when training, got input of shape ",
                 x.to_string());
  }
  DType dtype = in[0].dtype;
  return {{x, dtype}, {Shape{x[1]}, dtype}, {Shape{x[1]}, dtype}};
}

// Note [Batch norm loops]
// Both batch_norm and its backward run as loops of our own for float32 and
// float64 alike. oneDNN's batch normalization for plain NCHW data
// (ncsp_bnorm) took ~6.5 ms per training step of the tutorial CNN (batch
// 128; 4.6 ms of it for the first layer's 32 channels of 28x28) on the
// 2-core development machine; these loops take about half that. Channels are
// independent, so they are split across the cores; a channel's values (n
// runs of s contiguous elements) are read once from memory and then again
// from cache. Each run is summed in kLanes independent partial sums of T,
// which the compiler vectorizes without reassociating anything, and the
// runs' sums are added in double, so float32 loses little over a long
// channel.
constexpr int kLanes = 8;

// The sum of f(j) over j in [0, count).
template <class T, class F>
double run_sum(int64_t count, F f) {
  T lanes[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= count; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += f(j + l);
  }
  double sum = 0;
  for (; j < count; ++j) sum += f(j);
  for (T lane : lanes) sum += lane;
  return sum;
}

// Calls f(first, last) on ranges of channels, split across the cores with
// about kCheapGrain elements per share.
void for_channels(const BatchView& v, absl::FunctionRef<void(int64_t, int64_t)> f) {
  parallel_for(v.c, std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(1, v.count())), f);
}

void batch_norm_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gamma = c.inputs[1], &beta = c.inputs[2];
  const Tensor &running_mean = c.inputs[3], &running_var = c.inputs[4];
  const Tensor &y = c.outputs[0], &mean = c.outputs[1], &var = c.outputs[2];
  const bool training = c.attrs.get_bool("training");
  const double eps = eps_of(c.attrs);
  const BatchView v = batch_view(x.shape());
  if (!training) {
    std::memcpy(mean.raw_data(), running_mean.raw_data(), mean.nbytes());
    std::memcpy(var.raw_data(), running_var.raw_data(), var.nbytes());
  }
  visit_floating(x.dtype(), [&]<class T>() {
    const T *px = x.data<T>(), *pg = gamma.data<T>(), *pb = beta.data<T>();
    T *py = y.data<T>(), *pm = mean.data<T>(), *pv = var.data<T>();
    const double m = static_cast<double>(v.count());
    for_channels(v, [&](int64_t first, int64_t last) {
      for (int64_t ch = first; ch < last; ++ch) {
        if (training) {
          // Two passes, the second over the deviations from the mean: the
          // one-pass sum of squares loses the variance of values far from 0.
          double sum = 0;
          for (int64_t i = 0; i < v.n; ++i) {
            const T* run = px + v.at(i, ch, 0);
            sum += run_sum<T>(v.s, [&](int64_t j) { return run[j]; });
          }
          const T mu = static_cast<T>(sum / m);
          double squares = 0;
          for (int64_t i = 0; i < v.n; ++i) {
            const T* run = px + v.at(i, ch, 0);
            squares += run_sum<T>(v.s, [&](int64_t j) { return (run[j] - mu) * (run[j] - mu); });
          }
          pm[ch] = mu;
          pv[ch] = static_cast<T>(squares / m);
        }
        // y = (x - mean) rstd gamma + beta = x scale + shift.
        const double scale = pg[ch] / std::sqrt(static_cast<double>(pv[ch]) + eps);
        const T a = static_cast<T>(scale), b = static_cast<T>(pb[ch] - pm[ch] * scale);
        for (int64_t i = 0; i < v.n; ++i) {
          const T* run = px + v.at(i, ch, 0);
          T* out = py + v.at(i, ch, 0);
          for (int64_t j = 0; j < v.s; ++j) out[j] = run[j] * a + b;
        }
      }
    });
  });
}

// batch_norm_backward(x, gamma, mean, var, grad_y, grad_mean, grad_var)
//   -> grad_x, grad_gamma, grad_beta, grad_running_mean, grad_running_var,
// where mean/var are the statistics the forward used (its outputs 1 and 2)
// and grad_mean/grad_var the gradients of those outputs. With xhat =
// (x - mean) rstd, M elements per channel and g = grad_y:
//   training: grad_x = gamma rstd / M (M g - sum g - xhat sum(g xhat))
//                      + grad_mean / M + grad_var 2 (x - mean) / M;
//             the running statistics get zero.
//   eval:     grad_x = g gamma rstd;
//             grad_running_mean = grad_mean - gamma rstd sum g;
//             grad_running_var = grad_var - gamma rstd^3 / 2 sum(g (x - mean)).
//   both:     grad_gamma = sum(g xhat), grad_beta = sum g.
TensorMetas infer_batch_norm_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in, {"x", "gamma", "mean", "var", "grad_y", "grad_mean", "grad_var"});
  const Shape& x = in[0].shape;
  TANDEM_CHECK(x.rank() >= 2, "x must be [batch, channels, ...], got shape ", x.to_string());
  eps_of(attrs);
  TANDEM_CHECK(in[4].shape == x, "grad_y must have x's shape ", x.to_string(), ", got ",
               in[4].shape.to_string());
  for (int i : {1, 2, 3, 5, 6}) {
    TANDEM_CHECK(in[i].shape == Shape{x[1]}, "input ", i, " must be [", x[1], "], got shape ",
                 in[i].shape.to_string());
  }
  DType dtype = in[0].dtype;
  Shape channel{x[1]};
  return {{x, dtype}, {channel, dtype}, {channel, dtype}, {channel, dtype}, {channel, dtype}};
}

void batch_norm_backward_kernel(const KernelContext& c) {
  const bool training = c.attrs.get_bool("training");
  const double eps = eps_of(c.attrs);
  const BatchView v = batch_view(c.inputs[0].shape());
  const double m = static_cast<double>(v.count());
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const T *x = c.inputs[0].data<T>(), *gamma = c.inputs[1].data<T>();
    const T *mean = c.inputs[2].data<T>(), *var = c.inputs[3].data<T>();
    const T *g = c.inputs[4].data<T>(), *g_mean = c.inputs[5].data<T>();
    const T* g_var = c.inputs[6].data<T>();
    T *gx = c.outputs[0].data<T>(), *g_gamma = c.outputs[1].data<T>();
    T *g_beta = c.outputs[2].data<T>(), *g_rm = c.outputs[3].data<T>();
    T* g_rv = c.outputs[4].data<T>();
    for_channels(v, [&](int64_t first, int64_t last) {
      for (int64_t ch = first; ch < last; ++ch) {
        const T mu = mean[ch];
        const double rstd = 1 / std::sqrt(static_cast<double>(var[ch]) + eps);
        double sum_g = 0, sum_g_xc = 0;  // xc = x - mean.
        for (int64_t i = 0; i < v.n; ++i) {
          const T *xs = x + v.at(i, ch, 0), *gs = g + v.at(i, ch, 0);
          sum_g += run_sum<T>(v.s, [&](int64_t j) { return gs[j]; });
          sum_g_xc += run_sum<T>(v.s, [&](int64_t j) { return gs[j] * (xs[j] - mu); });
        }
        const double sum_g_xhat = sum_g_xc * rstd, scale = gamma[ch] * rstd;
        g_gamma[ch] = static_cast<T>(sum_g_xhat);
        g_beta[ch] = static_cast<T>(sum_g);
        // The formulas above, regrouped as grad_x = scale g + k (x - mean) + b.
        double k = 0, b = 0;
        if (training) {
          k = (2 * g_var[ch] - scale * rstd * sum_g_xhat) / m;
          b = (g_mean[ch] - scale * sum_g) / m;
          g_rm[ch] = g_rv[ch] = 0;
        } else {
          // sum(g (x - mean)) = sum_g_xhat / rstd.
          g_rm[ch] = static_cast<T>(g_mean[ch] - scale * sum_g);
          g_rv[ch] = static_cast<T>(g_var[ch] - 0.5 * scale * rstd * sum_g_xhat);
        }
        const T ts = static_cast<T>(scale), tk = static_cast<T>(k), tb = static_cast<T>(b);
        for (int64_t i = 0; i < v.n; ++i) {
          const T *xs = x + v.at(i, ch, 0), *gs = g + v.at(i, ch, 0);
          T* out = gx + v.at(i, ch, 0);
          for (int64_t j = 0; j < v.s; ++j) out[j] = ts * gs[j] + tk * (xs[j] - mu) + tb;
        }
      }
    });
  });
}

std::vector<Tensor> batch_norm_gradient(const GradContext& c) {
  const Tensor& x = c.inputs[0];
  // Outputs without a gradient contribute zeros.
  auto or_zeros = [&](const Tensor& t, const Shape& shape) {
    return t.defined() ? t : zeros(shape, x.dtype(), x.device());
  };
  const Shape channel{x.shape()[1]};
  const Tensor g = or_zeros(c.grad_outputs[0], x.shape());
  std::vector<Tensor> grads =
      nested_call("batch_norm_backward",
                  {x, c.inputs[1], c.outputs[1], c.outputs[2], g,
                   or_zeros(c.grad_outputs[1], channel), or_zeros(c.grad_outputs[2], channel)},
                  c.attrs);
  if (c.attrs.get_bool("training")) grads[3] = grads[4] = Tensor();
  return grads;
}

// layer_norm: x seen as [rows, d], d the product of the normalized axes.
struct RowView {
  int64_t rows = 1, d = 1;
};

RowView row_view(const Shape& x, int64_t axes) {
  RowView v;
  for (int i = 0; i < x.rank(); ++i) (i < x.rank() - axes ? v.rows : v.d) *= x[i];
  return v;
}

int64_t normalized_axes_of(const Shape& x, const Attrs& attrs) {
  int64_t axes = attrs.get_int("normalized_axes");
  TANDEM_CHECK(axes >= 1 && axes <= x.rank(), "normalized_axes must be in [1, ", x.rank(),
               "] for x of shape ", x.to_string(), ", got ", axes);
  return axes;
}

Shape trailing(const Shape& x, int64_t axes) {
  return Shape(absl::Span<const int64_t>(x.dims().data() + x.rank() - axes, axes));
}

TensorMetas infer_layer_norm(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in, {"x", "gamma", "beta"});
  const Shape& x = in[0].shape;
  Shape normalized = trailing(x, normalized_axes_of(x, attrs));
  eps_of(attrs);
  TANDEM_CHECK(in[1].shape == normalized && in[2].shape == normalized,
               "gamma and beta must have the normalized shape ", normalized.to_string(), " of x ",
               x.to_string(), ", got ", in[1].shape.to_string(), " and ", in[2].shape.to_string());
  return {{x, in[0].dtype}};
}

void layer_norm_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gamma = c.inputs[1], &beta = c.inputs[2], &y = c.outputs[0];
  const double eps = eps_of(c.attrs);
  const RowView v = row_view(x.shape(), normalized_axes_of(x.shape(), c.attrs));
  if (x.numel() == 0) return;
  visit_floating(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) {
      using namespace onednn;
      using tag = dnnl::memory::format_tag;
      dnnl::memory::desc data = desc({v.rows, v.d}, tag::ab);
      dnnl::memory::desc channel = desc({v.d}, tag::x);
      auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
      const dnnl::layer_normalization_forward::desc op(dnnl::prop_kind::forward_inference, data,
                                                       static_cast<float>(eps), flags);
      const auto norm = cached_primitive<dnnl::layer_normalization_forward>(
          "layer normalization", PrimitiveKey().add(op.data),
          [&] { return dnnl::layer_normalization_forward::primitive_desc(op, cpu_engine()); });
      execute(norm->primitive,
              {{DNNL_ARG_SRC, wrap(x, data)},
               {DNNL_ARG_DST, wrap(y, data)},
               {DNNL_ARG_SCALE, wrap(gamma, channel)},
               {DNNL_ARG_SHIFT, wrap(beta, channel)}},
              "layer normalization");
    } else {
      const T *px = x.data<T>(), *pg = gamma.data<T>(), *pb = beta.data<T>();
      T* py = y.data<T>();
      for (int64_t r = 0; r < v.rows; ++r) {
        const T* row = px + r * v.d;
        double sum = 0, squares = 0;
        for (int64_t j = 0; j < v.d; ++j) sum += row[j];
        double mu = sum / static_cast<double>(v.d);
        for (int64_t j = 0; j < v.d; ++j) squares += (row[j] - mu) * (row[j] - mu);
        double rstd = 1 / std::sqrt(squares / static_cast<double>(v.d) + eps);
        for (int64_t j = 0; j < v.d; ++j) {
          py[r * v.d + j] = static_cast<T>((row[j] - mu) * rstd * pg[j] + pb[j]);
        }
      }
    }
  });
}

// layer_norm_backward(x, gamma, grad_y) -> grad_x, grad_gamma, grad_beta.
// Per row, with xhat = (x - mean) rstd and gy = g gamma:
//   grad_x = rstd (gy - mean(gy) - xhat mean(gy xhat));
// over rows: grad_gamma = sum(g xhat), grad_beta = sum g.
TensorMetas infer_layer_norm_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in, {"x", "gamma", "grad_y"});
  const Shape& x = in[0].shape;
  Shape normalized = trailing(x, normalized_axes_of(x, attrs));
  eps_of(attrs);
  TANDEM_CHECK(in[1].shape == normalized && in[2].shape == x, "gamma must be ",
               normalized.to_string(), " and grad_y ", x.to_string(), ", got ",
               in[1].shape.to_string(), " and ", in[2].shape.to_string());
  return {{x, in[0].dtype}, {normalized, in[0].dtype}, {normalized, in[0].dtype}};
}

void layer_norm_backward_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const double eps = eps_of(c.attrs);
  const RowView v = row_view(x.shape(), normalized_axes_of(x.shape(), c.attrs));
  visit_floating(x.dtype(), [&]<class T>() {
    const T *px = x.data<T>(), *gamma = c.inputs[1].data<T>(), *g = c.inputs[2].data<T>();
    T *gx = c.outputs[0].data<T>(), *g_gamma = c.outputs[1].data<T>();
    T* g_beta = c.outputs[2].data<T>();
    std::vector<double> sum_gamma(v.d, 0.0), sum_beta(v.d, 0.0), xhat(v.d);
    const double d = static_cast<double>(v.d);
    for (int64_t r = 0; r < v.rows; ++r) {
      const T* row = px + r * v.d;
      const T* grow = g + r * v.d;
      double sum = 0, squares = 0;
      for (int64_t j = 0; j < v.d; ++j) sum += row[j];
      double mu = sum / d;
      for (int64_t j = 0; j < v.d; ++j) squares += (row[j] - mu) * (row[j] - mu);
      double rstd = 1 / std::sqrt(squares / d + eps);
      double mean_gy = 0, mean_gy_xhat = 0;
      for (int64_t j = 0; j < v.d; ++j) {
        xhat[j] = (row[j] - mu) * rstd;
        double gy = grow[j] * gamma[j];
        mean_gy += gy / d;
        mean_gy_xhat += gy * xhat[j] / d;
        sum_gamma[j] += grow[j] * xhat[j];
        sum_beta[j] += grow[j];
      }
      for (int64_t j = 0; j < v.d; ++j) {
        double gy = grow[j] * gamma[j];
        gx[r * v.d + j] = static_cast<T>(rstd * (gy - mean_gy - xhat[j] * mean_gy_xhat));
      }
    }
    for (int64_t j = 0; j < v.d; ++j) {
      g_gamma[j] = static_cast<T>(sum_gamma[j]);
      g_beta[j] = static_cast<T>(sum_beta[j]);
    }
  });
}

std::vector<Tensor> layer_norm_gradient(const GradContext& c) {
  return nested_call("layer_norm_backward", {c.inputs[0], c.inputs[1], c.grad_outputs[0]}, c.attrs);
}

std::vector<AttrSpec> batch_norm_attrs() { return {{"training", false}, {"eps", 1e-5}}; }
std::vector<AttrSpec> layer_norm_attrs() {
  return {{"normalized_axes", int64_t{1}}, {"eps", 1e-5}};
}

}  // namespace

const OpDef& batch_norm_op() { return op_def<"batch_norm">(); }
const OpDef& layer_norm_op() { return op_def<"layer_norm">(); }

void register_norm_ops(Registry& registry) {
  registry.add({.name = "batch_norm",
                .num_inputs = 5,
                .num_outputs = 3,
                .attrs = batch_norm_attrs(),
                .infer = infer_batch_norm,
                .cpu = batch_norm_kernel,
                .gradient = batch_norm_gradient,
                .doc = "batch normalization of x [N, C, ...] -> y, mean, var (batch statistics "
                       "when training, else copies of the running ones)",
                .uses_all_cores = true});
  registry.add({.name = "batch_norm_backward",
                .num_inputs = 7,
                .num_outputs = 5,
                .attrs = batch_norm_attrs(),
                .infer = infer_batch_norm_backward,
                .cpu = batch_norm_backward_kernel,
                .differentiable = false,
                .doc = "gradient of batch_norm: (x, gamma, mean, var, grad_y, grad_mean, "
                       "grad_var) -> grad_x, grad_gamma, grad_beta, grad_running_mean, "
                       "grad_running_var"});
  registry.add({.name = "layer_norm",
                .num_inputs = 3,
                .attrs = layer_norm_attrs(),
                .infer = infer_layer_norm,
                .cpu = layer_norm_kernel,
                .gradient = layer_norm_gradient,
                .doc = "layer normalization over the trailing normalized_axes axes of x",
                .uses_all_cores = true});
  registry.add({.name = "layer_norm_backward",
                .num_inputs = 3,
                .num_outputs = 3,
                .attrs = layer_norm_attrs(),
                .infer = infer_layer_norm_backward,
                .cpu = layer_norm_backward_kernel,
                .differentiable = false,
                .doc = "gradient of layer_norm: (x, gamma, grad_y) -> grad_x, grad_gamma, "
                       "grad_beta"});
}

}  // namespace tandem::kernels
