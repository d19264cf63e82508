// Softmax and losses: softmax and log_softmax along one axis (max-subtracted,
// so large logits do not overflow), cross_entropy (fused log_softmax + nll,
// with label smoothing), nll and mse, each with reduction "mean" (the
// default), "sum" or "none".
//
// cross_entropy and nll have dedicated backward ops (cross_entropy_backward,
// nll_backward; not differentiable) because their gradient needs a one-hot of
// the integer targets. Targets (int64) get no gradient. A target outside
// [0, classes) is found by the kernel, so it fails the op's outputs and the
// next read throws "cross_entropy: target 7 of sample 2 is out of range for 5
// classes".
//
// float32 softmax/log_softmax run on oneDNN; everything else is plain loops,
// which accumulate in double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/onednn.h"
#include "kernels/cpu/primitive_cache.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

// [outer, len, inner]: the tensor seen around one axis.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
};

AxisView axis_view(const Shape& shape, int axis) {
  AxisView v;
  for (int i = 0; i < axis; ++i) v.outer *= shape[i];
  v.len = shape[axis];
  for (int i = axis + 1; i < shape.rank(); ++i) v.inner *= shape[i];
  return v;
}

int softmax_axis(const Shape& shape, const Attrs& attrs) {
  TANDEM_CHECK(shape.rank() >= 1, "input must have at least one axis, got a scalar");
  return shape.normalize_axis(attrs.get_int("axis"));
}

TensorMetas infer_softmax(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("input", in[0].dtype);
  softmax_axis(in[0].shape, attrs);
  return {{in[0].shape, in[0].dtype}};
}

template <bool kLog>
void softmax_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  if (x.numel() == 0) return;
  AxisView v = axis_view(x.shape(), softmax_axis(x.shape(), c.attrs));
  visit_floating(x.dtype(), [&]<class T>() {
    if constexpr (std::is_same_v<T, float>) {
      using namespace onednn;
      dnnl::memory::desc md = desc({v.outer, v.len, v.inner}, dnnl::memory::format_tag::abc);
      dnnl::prop_kind prop = dnnl::prop_kind::forward_inference;
      if constexpr (kLog) {
        const dnnl::logsoftmax_forward::desc op(prop, md, 1);
        const auto softmax = cached_primitive<dnnl::logsoftmax_forward>(
            "log_softmax", PrimitiveKey().add(op.data),
            [&] { return dnnl::logsoftmax_forward::primitive_desc(op, cpu_engine()); });
        execute(softmax->primitive, {{DNNL_ARG_SRC, wrap(x, md)}, {DNNL_ARG_DST, wrap(y, md)}},
                "log_softmax");
      } else {
        const dnnl::softmax_forward::desc op(prop, md, 1);
        const auto softmax = cached_primitive<dnnl::softmax_forward>(
            "softmax", PrimitiveKey().add(op.data),
            [&] { return dnnl::softmax_forward::primitive_desc(op, cpu_engine()); });
        execute(softmax->primitive, {{DNNL_ARG_SRC, wrap(x, md)}, {DNNL_ARG_DST, wrap(y, md)}},
                "softmax");
      }
    } else {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      for (int64_t o = 0; o < v.outer; ++o) {
        for (int64_t in = 0; in < v.inner; ++in) {
          const int64_t base = o * v.len * v.inner + in;
          T max = -std::numeric_limits<T>::infinity();
          for (int64_t j = 0; j < v.len; ++j) max = std::max(max, px[base + j * v.inner]);
          T sum = 0;
          for (int64_t j = 0; j < v.len; ++j) sum += std::exp(px[base + j * v.inner] - max);
          T log_sum = std::log(sum);
          for (int64_t j = 0; j < v.len; ++j) {
            T shifted = px[base + j * v.inner] - max;
            py[base + j * v.inner] = kLog ? shifted - log_sum : std::exp(shifted) / sum;
          }
        }
      }
    }
  });
}

Tensor sum_keep(const Tensor& t, int64_t axis) {
  return nested_call1(sum_op(), {t}, {{"axes", std::vector<int64_t>{axis}}, {"keepdims", true}});
}

// dx = y * (g - sum(g * y)) along the axis.
std::vector<Tensor> softmax_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = c.grad_outputs[0];
  int64_t axis = softmax_axis(y.shape(), c.attrs);
  return {nested_call1(
      elementwise::Mul::kName,
      {y, nested_call1(op_def<elementwise::Sub>(),
                       {g, sum_keep(nested_call1(op_def<elementwise::Mul>(), {g, y}), axis)})})};
}

// dx = g - exp(y) * sum(g) along the axis.
std::vector<Tensor> log_softmax_gradient(const GradContext& c) {
  const Tensor& y = c.outputs[0];
  const Tensor& g = c.grad_outputs[0];
  int64_t axis = softmax_axis(y.shape(), c.attrs);
  return {nested_call1(
      op_def<elementwise::Sub>(),
      {g, nested_call1(op_def<elementwise::Mul>(),
                       {nested_call1(op_def<elementwise::Exp>(), {y}), sum_keep(g, axis)})})};
}

// Losses.

enum class Reduction { kMean, kSum, kNone };

Reduction reduction_of(const Attrs& attrs) {
  const std::string& r = attrs.get_string("reduction");
  if (r == "mean") return Reduction::kMean;
  if (r == "sum") return Reduction::kSum;
  TANDEM_CHECK(r == "none", "reduction must be \"mean\", \"sum\" or \"none\", got \"", r, "\"");
  return Reduction::kNone;
}

// The loss's shape: a scalar, or one value per sample for "none".
Shape loss_shape(const Attrs& attrs, const Shape& per_sample) {
  return reduction_of(attrs) == Reduction::kNone ? per_sample : Shape{};
}

// Checks [N, C] floating scores and [N] int64 targets.
void check_classification(absl::Span<const TensorMeta> in, const char* scores) {
  check_floating(scores, in[0].dtype);
  TANDEM_CHECK(in[0].shape.rank() == 2, scores, " must be [batch, classes], got shape ",
               in[0].shape.to_string());
  TANDEM_CHECK(in[1].dtype == DType::kInt64, "target must be int64 class indices, got ",
               dtype_name(in[1].dtype));
  TANDEM_CHECK(in[1].shape.rank() == 1 && in[1].shape[0] == in[0].shape[0], "target must be [",
               in[0].shape[0], "] for ", scores, " of shape ", in[0].shape.to_string(), ", got ",
               in[1].shape.to_string());
}

double label_smoothing_of(const Attrs& attrs) {
  double e = attrs.get_float("label_smoothing");
  TANDEM_CHECK(e >= 0 && e < 1, "label_smoothing must be in [0, 1), got ", e);
  return e;
}

TensorMetas infer_cross_entropy(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_classification(in, "logits");
  label_smoothing_of(attrs);
  return {{loss_shape(attrs, Shape{in[0].shape[0]}), in[0].dtype}};
}

// The backward ops take the forward's inputs and the loss's gradient.
TensorMetas infer_classification_backward(absl::Span<const TensorMeta> in, const Attrs& attrs,
                                          const char* scores) {
  check_classification(in, scores);
  Shape expected = loss_shape(attrs, Shape{in[0].shape[0]});
  TANDEM_CHECK(in[2].dtype == in[0].dtype && in[2].shape == expected, "grad must be ",
               dtype_name(in[0].dtype), " ", expected.to_string(), ", got ",
               dtype_name(in[2].dtype), " ", in[2].shape.to_string());
  return {{in[0].shape, in[0].dtype}};
}

TensorMetas infer_cross_entropy_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  label_smoothing_of(attrs);
  return infer_classification_backward(in, attrs, "logits");
}

// Target i, checked against the classes of `scores` [N, C].
int64_t checked_target(const int64_t* target, int64_t i, const Shape& scores) {
  int64_t t = target[i];
  TANDEM_CHECK(t >= 0 && t < scores[1], "target ", t, " of sample ", i, " is out of range for ",
               scores[1], " classes (input of shape ", scores.to_string(), ")");
  return t;
}

// Writes the per-sample losses reduced as the attrs say.
template <class T>
void write_loss(const std::vector<double>& losses, Reduction reduction, T* out) {
  if (reduction == Reduction::kNone) {
    for (size_t i = 0; i < losses.size(); ++i) out[i] = static_cast<T>(losses[i]);
    return;
  }
  double total = 0;
  for (double l : losses) total += l;
  // The mean of no samples is NaN, as in PyTorch.
  if (reduction == Reduction::kMean) total /= static_cast<double>(losses.size());
  out[0] = static_cast<T>(total);
}

// The gradient of sample i's loss: g, or g / N for the mean.
template <class T>
double sample_grad(const T* grad, int64_t i, int64_t n, Reduction reduction) {
  if (reduction == Reduction::kNone) return grad[i];
  return reduction == Reduction::kMean ? grad[0] / static_cast<double>(n) : grad[0];
}

// loss_i = logsumexp(x_i) - (1 - e) x_i[t_i] - e/C sum_c x_i[c].
void cross_entropy_kernel(const KernelContext& c) {
  const Tensor &logits = c.inputs[0], &target = c.inputs[1];
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  const double e = c.attrs.get_float("label_smoothing");
  const Reduction reduction = reduction_of(c.attrs);
  visit_floating(logits.dtype(), [&]<class T>() {
    const T* x = logits.data<T>();
    const int64_t* t = target.data<int64_t>();
    std::vector<double> losses(n);
    for (int64_t i = 0; i < n; ++i) {
      int64_t label = checked_target(t, i, logits.shape());
      const T* row = x + i * classes;
      double max = *std::max_element(row, row + classes);
      double sum = 0, total = 0;
      for (int64_t j = 0; j < classes; ++j) {
        sum += std::exp(row[j] - max);
        total += row[j];
      }
      double lse = max + std::log(sum);
      losses[i] = lse - (1 - e) * row[label] - e / static_cast<double>(classes) * total;
    }
    write_loss(losses, reduction, c.outputs[0].data<T>());
  });
}

// d loss_i / d x_i[c] = softmax(x_i)[c] - (1 - e) [c == t_i] - e / C.
void cross_entropy_backward_kernel(const KernelContext& c) {
  const Tensor &logits = c.inputs[0], &target = c.inputs[1], &grad = c.inputs[2];
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  const double e = c.attrs.get_float("label_smoothing");
  const Reduction reduction = reduction_of(c.attrs);
  visit_floating(logits.dtype(), [&]<class T>() {
    const T* x = logits.data<T>();
    const int64_t* t = target.data<int64_t>();
    T* out = c.outputs[0].data<T>();
    for (int64_t i = 0; i < n; ++i) {
      int64_t label = checked_target(t, i, logits.shape());
      double g = sample_grad(grad.data<T>(), i, n, reduction);
      const T* row = x + i * classes;
      double max = *std::max_element(row, row + classes);
      double sum = 0;
      for (int64_t j = 0; j < classes; ++j) sum += std::exp(row[j] - max);
      for (int64_t j = 0; j < classes; ++j) {
        double p = std::exp(row[j] - max) / sum;
        double d = p - (j == label ? 1 - e : 0) - e / static_cast<double>(classes);
        out[i * classes + j] = static_cast<T>(g * d);
      }
    }
  });
}

std::vector<Tensor> cross_entropy_gradient(const GradContext& c) {
  return {nested_call1("cross_entropy_backward", {c.inputs[0], c.inputs[1], c.grad_outputs[0]},
                       c.attrs),
          Tensor()};
}

TensorMetas infer_nll(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_classification(in, "log_probs");
  return {{loss_shape(attrs, Shape{in[0].shape[0]}), in[0].dtype}};
}

TensorMetas infer_nll_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  return infer_classification_backward(in, attrs, "log_probs");
}

// loss_i = -log_probs[i, t_i].
void nll_kernel(const KernelContext& c) {
  const Tensor &lp = c.inputs[0], &target = c.inputs[1];
  const int64_t n = lp.shape()[0], classes = lp.shape()[1];
  visit_floating(lp.dtype(), [&]<class T>() {
    const T* x = lp.data<T>();
    const int64_t* t = target.data<int64_t>();
    std::vector<double> losses(n);
    for (int64_t i = 0; i < n; ++i) losses[i] = -x[i * classes + checked_target(t, i, lp.shape())];
    write_loss(losses, reduction_of(c.attrs), c.outputs[0].data<T>());
  });
}

void nll_backward_kernel(const KernelContext& c) {
  const Tensor &lp = c.inputs[0], &target = c.inputs[1], &grad = c.inputs[2];
  const int64_t n = lp.shape()[0], classes = lp.shape()[1];
  const Reduction reduction = reduction_of(c.attrs);
  visit_floating(lp.dtype(), [&]<class T>() {
    const int64_t* t = target.data<int64_t>();
    T* out = c.outputs[0].data<T>();
    std::fill(out, out + n * classes, T{0});
    for (int64_t i = 0; i < n; ++i) {
      out[i * classes + checked_target(t, i, lp.shape())] =
          static_cast<T>(-sample_grad(grad.data<T>(), i, n, reduction));
    }
  });
}

std::vector<Tensor> nll_gradient(const GradContext& c) {
  return {nested_call1("nll_backward", {c.inputs[0], c.inputs[1], c.grad_outputs[0]}, c.attrs),
          Tensor()};
}

TensorMetas infer_mse(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("input", in[0].dtype);
  TANDEM_CHECK(in[0].dtype == in[1].dtype && in[0].shape == in[1].shape,
               "input and target must have the same shape and dtype, got ", dtype_name(in[0].dtype),
               " ", in[0].shape.to_string(), " and ", dtype_name(in[1].dtype), " ",
               in[1].shape.to_string());
  return {{loss_shape(attrs, in[0].shape), in[0].dtype}};
}

void mse_kernel(const KernelContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  visit_floating(a.dtype(), [&]<class T>() {
    const T *pa = a.data<T>(), *pb = b.data<T>();
    std::vector<double> losses(a.numel());
    for (int64_t i = 0; i < a.numel(); ++i) {
      double d = static_cast<double>(pa[i]) - static_cast<double>(pb[i]);
      losses[i] = d * d;
    }
    write_loss(losses, reduction_of(c.attrs), c.outputs[0].data<T>());
  });
}

// d/da = 2 (a - b) g (/ numel for the mean); d/db = -d/da.
std::vector<Tensor> mse_gradient(const GradContext& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  Tensor scaled =
      nested_call1(op_def<elementwise::Mul>(),
                   {nested_call1(op_def<elementwise::Sub>(), {a, b}), scalar_tensor(2, a.dtype())});
  if (reduction_of(c.attrs) == Reduction::kMean) {
    scaled = nested_call1(op_def<elementwise::Div>(),
                          {scaled, size_scalar(a.numel(), a.dtype(), a.device())});
  }
  Tensor grad_a = nested_call1(op_def<elementwise::Mul>(), {c.grad_outputs[0], scaled});
  return {grad_a, nested_call1(op_def<elementwise::Mul>(), {grad_a, scalar_tensor(-1, a.dtype())})};
}

AttrSpec reduction_attr() { return {"reduction", std::string("mean")}; }

}  // namespace

void register_softmax_loss_ops(Registry& registry) {
  registry.add({.name = "softmax",
                .attrs = {{"axis", int64_t{-1}}},
                .infer = infer_softmax,
                .cpu = softmax_kernel<false>,
                .gradient = softmax_gradient,
                .doc = "exp(x) / sum(exp(x)) along axis",
                .uses_all_cores = true});
  registry.add({.name = "log_softmax",
                .attrs = {{"axis", int64_t{-1}}},
                .infer = infer_softmax,
                .cpu = softmax_kernel<true>,
                .gradient = log_softmax_gradient,
                .doc = "x - logsumexp(x) along axis",
                .uses_all_cores = true});
  registry.add({.name = "cross_entropy",
                .num_inputs = 2,
                .attrs = {{"label_smoothing", 0.0}, reduction_attr()},
                .infer = infer_cross_entropy,
                .cpu = cross_entropy_kernel,
                .gradient = cross_entropy_gradient,
                .doc = "softmax cross-entropy of logits [N, C] against int64 targets [N]"});
  registry.add({.name = "cross_entropy_backward",
                .num_inputs = 3,
                .attrs = {{"label_smoothing", 0.0}, reduction_attr()},
                .infer = infer_cross_entropy_backward,
                .cpu = cross_entropy_backward_kernel,
                .differentiable = false,
                .doc = "gradient of cross_entropy: (logits, target, grad) -> grad_logits"});
  registry.add({.name = "nll",
                .num_inputs = 2,
                .attrs = {reduction_attr()},
                .infer = infer_nll,
                .cpu = nll_kernel,
                .gradient = nll_gradient,
                .doc = "negative log-likelihood of log_probs [N, C] at int64 targets [N]"});
  registry.add({.name = "nll_backward",
                .num_inputs = 3,
                .attrs = {reduction_attr()},
                .infer = infer_nll_backward,
                .cpu = nll_backward_kernel,
                .differentiable = false,
                .doc = "gradient of nll: (log_probs, target, grad) -> grad_log_probs"});
  registry.add({.name = "mse",
                .num_inputs = 2,
                .attrs = {reduction_attr()},
                .infer = infer_mse,
                .cpu = mse_kernel,
                .gradient = mse_gradient,
                .doc = "(a - b)^2, reduced"});
}

const OpDef& softmax_op() { return op_def<"softmax">(); }
const OpDef& log_softmax_op() { return op_def<"log_softmax">(); }

}  // namespace tandem::kernels
