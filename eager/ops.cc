#include "eager/ops.h"

#include <mutex>

#include "core/error.h"
#include "core/tensor_observer.h"
#include "eager/autograd.h"
#include "kernels/dispatch.h"
#include "kernels/scalar.h"

namespace tandem {
namespace {

using kernels::Attrs;
using kernels::call1;

// The scalar operand of `op` in t's dtype; a value the dtype cannot hold is
// an error naming the op and the caller's line.
Tensor scalar_like(const Tensor& t, double value, const char* op, const Location& where) {
  CallSiteScope site(op, where);
  return kernels::scalar_tensor(value, t.dtype());
}

// None where they are the defaults (every axis, no keepdims): dispatch then
// shares the op's defaults instead of copying attributes.
Attrs reduce_attrs(const Dims& axes, bool keepdims) {
  if (axes.empty() && !keepdims) return {};
  return {{"axes", axes}, {"keepdims", keepdims}};
}

Attrs pool_attrs(const Dims& kernel, const Dims& stride, const Dims& padding) {
  return {{"kernel", kernel}, {"stride", stride}, {"padding", padding}};
}

Attrs max_pool_attrs(const Dims& kernel, const Dims& stride, const Dims& padding,
                     const Dims& dilation) {
  Attrs attrs = pool_attrs(kernel, stride, padding);
  attrs.set("dilation", dilation);
  return attrs;
}

// The global generator behind random ops: splitmix64 over a seeded counter.
struct Generator {
  std::mutex mu;
  uint64_t state = 0x5EED;
};

Generator& generator() {
  static Generator g;
  return g;
}

}  // namespace

namespace detail {

const kernels::OpDef& find_op(const char* name) { return kernels::Registry::global().get(name); }

Tensor call_unary(const kernels::OpDef& op, const Tensor& x,
                  std::initializer_list<std::pair<const char*, double>> params,
                  const Location& where) {
  Attrs attrs;
  for (const auto& [name, value] : params) attrs.set(name, value);
  return kernels::call1(op, {x}, attrs, where);
}

}  // namespace detail

Tensor add(const Tensor& a, const Tensor& b, Location where) {
  return call1<"add">({a, b}, {}, where);
}
Tensor sub(const Tensor& a, const Tensor& b, Location where) {
  return call1<"sub">({a, b}, {}, where);
}
Tensor mul(const Tensor& a, const Tensor& b, Location where) {
  return call1<"mul">({a, b}, {}, where);
}
Tensor div(const Tensor& a, const Tensor& b, Location where) {
  return call1<"div">({a, b}, {}, where);
}
Tensor pow(const Tensor& a, const Tensor& b, Location where) {
  return call1<"pow">({a, b}, {}, where);
}
Tensor maximum(const Tensor& a, const Tensor& b, Location where) {
  return call1<"maximum">({a, b}, {}, where);
}
Tensor minimum(const Tensor& a, const Tensor& b, Location where) {
  return call1<"minimum">({a, b}, {}, where);
}
Tensor add(const Tensor& a, double b, Location where) {
  return add(a, scalar_like(a, b, "add", where), where);
}
Tensor sub(const Tensor& a, double b, Location where) {
  return sub(a, scalar_like(a, b, "sub", where), where);
}
Tensor mul(const Tensor& a, double b, Location where) {
  return mul(a, scalar_like(a, b, "mul", where), where);
}
Tensor div(const Tensor& a, double b, Location where) {
  return div(a, scalar_like(a, b, "div", where), where);
}
Tensor pow(const Tensor& a, double b, Location where) {
  return pow(a, scalar_like(a, b, "pow", where), where);
}
Tensor eq(const Tensor& a, const Tensor& b, Location where) {
  return call1<"eq">({a, b}, {}, where);
}
Tensor ne(const Tensor& a, const Tensor& b, Location where) {
  return call1<"ne">({a, b}, {}, where);
}
Tensor lt(const Tensor& a, const Tensor& b, Location where) {
  return call1<"lt">({a, b}, {}, where);
}
Tensor le(const Tensor& a, const Tensor& b, Location where) {
  return call1<"le">({a, b}, {}, where);
}
Tensor gt(const Tensor& a, const Tensor& b, Location where) {
  return call1<"gt">({a, b}, {}, where);
}
Tensor ge(const Tensor& a, const Tensor& b, Location where) {
  return call1<"ge">({a, b}, {}, where);
}

Tensor neg(const Tensor& x, Location where) { return call1<"neg">({x}, {}, where); }
Tensor abs(const Tensor& x, Location where) { return call1<"abs">({x}, {}, where); }
Tensor exp(const Tensor& x, Location where) { return call1<"exp">({x}, {}, where); }
Tensor log(const Tensor& x, Location where) { return call1<"log">({x}, {}, where); }
Tensor sqrt(const Tensor& x, Location where) { return call1<"sqrt">({x}, {}, where); }
Tensor rsqrt(const Tensor& x, Location where) { return call1<"rsqrt">({x}, {}, where); }
Tensor square(const Tensor& x, Location where) { return call1<"square">({x}, {}, where); }
Tensor tanh(const Tensor& x, Location where) { return call1<"tanh">({x}, {}, where); }
Tensor sigmoid(const Tensor& x, Location where) { return call1<"sigmoid">({x}, {}, where); }
Tensor relu(const Tensor& x, Location where) { return call1<"relu">({x}, {}, where); }
Tensor leaky_relu(const Tensor& x, double alpha, Location where) {
  return call1<"leaky_relu">({x}, {{"alpha", alpha}}, where);
}
Tensor gelu(const Tensor& x, Location where) { return call1<"gelu">({x}, {}, where); }
Tensor clip(const Tensor& x, double min, double max, Location where) {
  return call1<"clip">({x}, {{"min", min}, {"max", max}}, where);
}
Tensor cast(const Tensor& x, DType dtype, Location where) {
  return call1<"cast">({x}, {{"dtype", dtype}}, where);
}
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, Location where) {
  return call1<"where">({cond, a, b}, {}, where);
}

Tensor sum(const Tensor& x, const Dims& axes, bool keepdims, Location where) {
  return call1<"sum">({x}, reduce_attrs(axes, keepdims), where);
}
Tensor mean(const Tensor& x, const Dims& axes, bool keepdims, Location where) {
  return call1<"mean">({x}, reduce_attrs(axes, keepdims), where);
}
Tensor max(const Tensor& x, const Dims& axes, bool keepdims, Location where) {
  return call1<"max">({x}, reduce_attrs(axes, keepdims), where);
}
Tensor min(const Tensor& x, const Dims& axes, bool keepdims, Location where) {
  return call1<"min">({x}, reduce_attrs(axes, keepdims), where);
}
Tensor var(const Tensor& x, const Dims& axes, bool keepdims, int64_t correction, Location where) {
  Attrs attrs = reduce_attrs(axes, keepdims);
  attrs.set("correction", correction);
  return call1<"var">({x}, attrs, where);
}
Tensor argmax(const Tensor& x, int64_t axis, bool keepdims, Location where) {
  return call1<"argmax">({x}, {{"axis", axis}, {"keepdims", keepdims}}, where);
}
Tensor prod(const Tensor& x, const Dims& axes, bool keepdims, Location where) {
  return call1<"prod">({x}, reduce_attrs(axes, keepdims), where);
}

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse, Location where) {
  return call1<"cumsum">({x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}},
                         where);
}
Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive, bool reverse, Location where) {
  return call1<"cumprod">({x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}},
                          where);
}

ValuesAndIndices sort(const Tensor& x, int64_t axis, bool descending, Location where) {
  std::vector<Tensor> out =
      kernels::call("sort", {x}, {{"axis", axis}, {"descending", descending}}, where);
  return {out[0], out[1]};
}
Tensor argsort(const Tensor& x, int64_t axis, bool descending, Location where) {
  return sort(x, axis, descending, where).indices;
}
ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t axis, bool largest, Location where) {
  std::vector<Tensor> out =
      kernels::call("topk", {x}, {{"k", k}, {"axis", axis}, {"largest", largest}}, where);
  return {out[0], out[1]};
}

Tensor reshape(const Tensor& x, const Dims& shape, Location where) {
  return call1<"reshape">({x}, {{"shape", shape}}, where);
}
Tensor flatten(const Tensor& x, int64_t start_axis, int64_t end_axis, Location where) {
  return call1<"flatten">({x}, {{"start_axis", start_axis}, {"end_axis", end_axis}}, where);
}
Tensor transpose(const Tensor& x, const Dims& perm, Location where) {
  return call1<"transpose">({x}, {{"perm", perm}}, where);
}
Tensor concat(const std::vector<Tensor>& xs, int64_t axis, Location where) {
  return call1<"concat">(xs, {{"axis", axis}}, where);
}
Tensor stack(const std::vector<Tensor>& xs, int64_t axis, Location where) {
  return call1<"stack">(xs, {{"axis", axis}}, where);
}
std::vector<Tensor> split(const Tensor& x, const Dims& sizes, int64_t axis, Location where) {
  return kernels::call("split", {x}, {{"sizes", sizes}, {"axis", axis}}, where);
}
Tensor slice(const Tensor& x, int64_t axis, int64_t begin, int64_t end, int64_t step,
             Location where) {
  return call1<"slice">({x}, {{"axis", axis}, {"begin", begin}, {"end", end}, {"step", step}},
                        where);
}
Tensor take(const Tensor& x, const Tensor& indices, int64_t axis, Location where) {
  return call1<"take">({x, indices}, {{"axis", axis}}, where);
}
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis, Location where) {
  return call1<"gather">({x, indices}, {{"axis", axis}}, where);
}
Tensor scatter(const Tensor& x, const Tensor& indices, const Tensor& src, int64_t axis,
               Location where) {
  return call1<"scatter">({x, indices, src}, {{"axis", axis}}, where);
}
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& src, int64_t axis,
                   Location where) {
  return call1<"scatter_add">({x, indices, src}, {{"axis", axis}}, where);
}
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims, Location where) {
  return call1<"gather_nd">({x, indices}, {{"batch_dims", batch_dims}}, where);
}
Tensor scatter_nd_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                      int64_t batch_dims, Location where) {
  return call1<"scatter_nd_add">({x, indices, updates}, {{"batch_dims", batch_dims}}, where);
}
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype, Location where) {
  return call1<"one_hot">({indices}, {{"num_classes", num_classes}, {"dtype", dtype}}, where);
}
Tensor pad(const Tensor& x, const Dims& pads, double value, Location where) {
  return call1<"pad">({x}, {{"pads", pads}, {"value", value}}, where);
}
Tensor pad(const Tensor& x, const Dims& pads, std::string_view mode, double value, Location where) {
  return call1<"pad">({x}, {{"pads", pads}, {"value", value}, {"mode", std::string(mode)}}, where);
}
Tensor expand(const Tensor& x, const Dims& shape, Location where) {
  return call1<"expand">({x}, {{"shape", shape}}, where);
}
Tensor interpolate(const Tensor& x, const Dims& size, std::string_view mode, bool align_corners,
                   Location where) {
  // torch's per-rank names for linear interpolation.
  std::string op_mode(mode);
  const bool bilinear = mode == "bilinear", trilinear = mode == "trilinear";
  if (bilinear || trilinear) {
    const size_t axes = bilinear ? 2 : 3;
    if (size.size() != axes) {
      CallSiteScope site("interpolate", where);
      TANDEM_CHECK(false, "mode '", mode, "' needs ", axes, " spatial sizes, got ", size.size(),
                   "; 'linear' takes any number");
    }
    op_mode = "linear";
  }
  return call1<"interpolate">(
      {x}, {{"size", size}, {"mode", op_mode}, {"align_corners", align_corners}}, where);
}

Tensor zeros(const Dims& shape, DType dtype, Device device, Location where) {
  return call1<"zeros">({}, {{"shape", shape}, {"dtype", dtype}, {"device", device.to_string()}},
                        where);
}
Tensor ones(const Dims& shape, DType dtype, Device device, Location where) {
  return call1<"ones">({}, {{"shape", shape}, {"dtype", dtype}, {"device", device.to_string()}},
                       where);
}
Tensor full(const Dims& shape, double value, DType dtype, Device device, Location where) {
  return call1<"full">(
      {}, {{"shape", shape}, {"dtype", dtype}, {"value", value}, {"device", device.to_string()}},
      where);
}
Tensor arange(double start, double stop, double step, DType dtype, Device device, Location where) {
  return call1<"arange">({},
                         {{"start", start},
                          {"stop", stop},
                          {"step", step},
                          {"dtype", dtype},
                          {"device", device.to_string()}},
                         where);
}
Tensor rand(const Dims& shape, DType dtype, Device device, Location where) {
  return call1<"rand">({},
                       {{"shape", shape},
                        {"dtype", dtype},
                        {"seed", static_cast<int64_t>(next_seed())},
                        {"device", device.to_string()}},
                       where);
}
Tensor randn(const Dims& shape, DType dtype, Device device, Location where) {
  return call1<"randn">({},
                        {{"shape", shape},
                         {"dtype", dtype},
                         {"seed", static_cast<int64_t>(next_seed())},
                         {"device", device.to_string()}},
                        where);
}

Tensor to(const Tensor& x, Device device, Location where) {
  if (x.device() == device) return x;
  return call1<"to_device">({x}, {{"device", device.to_string()}}, where);
}

void move_to_(const Tensor& x, Device device, Location where) {
  CallSiteScope site("move_to_", where);
  TANDEM_CHECK(x.defined(), "cannot move an undefined tensor");
  if (x.device() == device) return;
  TensorImpl& impl = *x.impl_ptr();
  TANDEM_CHECK(impl.autograd == nullptr || impl.autograd->grad_fn == nullptr,
               "can only move a leaf tensor in place; this one is the result of op '",
               impl.autograd ? impl.autograd->grad_fn->display_name() : "",
               "' (use to(device) for a copy)");
  TANDEM_CHECK(current_tensor_observer() == nullptr, "cannot move a ", dtype_name(x.dtype()),
               x.shape().to_string(), " tensor from ", x.device().to_string(), " to ",
               device.to_string(),
               " while a function is being traced (hybridize): move modules and optimizer "
               "state before the first hybridized call");
  NoGradGuard no_grad;
  // The copy reads a snapshot: ops pushed before keep the data they were given.
  Tensor moved = to(x.snapshot(), device, where);
  impl.rebind(moved.binding());
  if (impl.autograd != nullptr && impl.autograd->grad.defined()) {
    impl.autograd->grad = to(impl.autograd->grad.snapshot(), device, where);
  }
}

void manual_seed(uint64_t seed) {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  g.state = seed;
}

uint64_t random_state() {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  return g.state;
}

uint64_t next_seed() {
  Generator& g = generator();
  std::lock_guard lock(g.mu);
  uint64_t z = (g.state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) >> 1;  // Non-negative as an int64 attribute.
}

Tensor matmul(const Tensor& a, const Tensor& b, Location where) {
  return call1<"matmul">({a, b}, {}, where);
}
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Location where) {
  return call1<"linear">({x, weight, bias}, {}, where);
}
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Dims& stride,
              const Dims& padding, const Dims& dilation, int64_t groups, Location where) {
  return call1<"conv2d">(
      {x, weight, bias},
      {{"stride", stride}, {"padding", padding}, {"dilation", dilation}, {"groups", groups}},
      where);
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Dims& stride, const Dims& padding, const Dims& output_padding,
                        int64_t groups, const Dims& dilation, Location where) {
  return call1<"conv_transpose2d">({x, weight, bias},
                                   {{"stride", stride},
                                    {"padding", padding},
                                    {"output_padding", output_padding},
                                    {"dilation", dilation},
                                    {"groups", groups}},
                                   where);
}
Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                       const Tensor& mask, bool causal, double scale, double dropout_p,
                       int64_t heads, Location where) {
  std::vector<Tensor> inputs = {query, key, value};
  if (mask.defined()) inputs.push_back(mask);
  // A seed whether or not dropout draws: a hybridized replay gives every
  // random op a fresh one (trace/executor.h), and eager calls must take as
  // many from the generator for the ops after them to see the same seeds.
  const auto seed = static_cast<int64_t>(next_seed());
  return kernels::call("scaled_dot_product_attention", inputs,
                       {{"scale", scale},
                        {"causal", causal},
                        {"dropout_p", dropout_p},
                        {"seed", seed},
                        {"heads", heads}},
                       where)[0];
}
std::vector<Tensor> recurrent_layer(RecurrentKind kind, const Tensor& projected,
                                    const Tensor& weight_hh, const Tensor& bias_hh,
                                    const Tensor& h0, const Tensor& c0, bool reverse,
                                    Location where) {
  const bool lstm = kind == RecurrentKind::kLstm;
  TANDEM_CHECK(lstm || !c0.defined(), "recurrent_layer: only an LSTM has a cell state c0");
  std::vector<Tensor> inputs = {projected, weight_hh, bias_hh};
  if (h0.defined()) inputs.push_back(h0);
  if (c0.defined()) inputs.push_back(c0);
  Attrs attrs = {{"reverse", reverse}, {"initial_h", h0.defined()}};
  if (lstm) attrs.set("initial_c", c0.defined());
  const char* op = lstm                              ? "lstm"
                   : kind == RecurrentKind::kGru     ? "gru"
                   : kind == RecurrentKind::kRnnRelu ? "rnn_relu"
                                                     : "rnn_tanh";
  std::vector<Tensor> out = kernels::call(op, inputs, attrs, where);
  out.resize(lstm ? 3 : 2);  // The rest is saved for the backward.
  return out;
}
Tensor max_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding,
                  const Dims& dilation, Location where) {
  return call1<"max_pool2d">({x}, max_pool_attrs(kernel, stride, padding, dilation), where);
}
ValuesAndIndices max_pool2d_with_indices(const Tensor& x, const Dims& kernel, const Dims& stride,
                                         const Dims& padding, const Dims& dilation,
                                         Location where) {
  const Attrs attrs = max_pool_attrs(kernel, stride, padding, dilation);
  return {call1<"max_pool2d">({x}, attrs, where), call1<"max_pool2d_indices">({x}, attrs, where)};
}
Tensor avg_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride, const Dims& padding,
                  Location where) {
  return call1<"avg_pool2d">({x}, pool_attrs(kernel, stride, padding), where);
}
Tensor adaptive_avg_pool2d(const Tensor& x, const Dims& output_size, Location where) {
  return call1<"adaptive_avg_pool2d">({x}, {{"output_size", output_size}}, where);
}
Tensor softmax(const Tensor& x, int64_t axis, Location where) {
  return call1<"softmax">({x}, {{"axis", axis}}, where);
}
Tensor log_softmax(const Tensor& x, int64_t axis, Location where) {
  return call1<"log_softmax">({x}, {{"axis", axis}}, where);
}
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing,
                     const std::string& reduction, Location where) {
  return call1<"cross_entropy">(
      {logits, target}, {{"label_smoothing", label_smoothing}, {"reduction", reduction}}, where);
}
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const std::string& reduction,
                Location where) {
  return call1<"nll">({log_probs, target}, {{"reduction", reduction}}, where);
}
Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction, Location where) {
  return call1<"mse">({a, b}, {{"reduction", reduction}}, where);
}
Tensor embedding(const Tensor& weight, const Tensor& indices, Location where) {
  return call1<"embedding">({weight, indices}, {}, where);
}
std::vector<Tensor> batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double eps, Location where) {
  return kernels::call("batch_norm", {x, gamma, beta, running_mean, running_var},
                       {{"training", training}, {"eps", eps}}, where);
}
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int64_t normalized_axes,
                  double eps, Location where) {
  return kernels::call("layer_norm", {x, gamma, beta},
                       {{"normalized_axes", normalized_axes}, {"eps", eps}}, where)[0];
}
Tensor dropout(const Tensor& x, double p, bool training, Location where) {
  if (!training || p == 0) return x;
  return kernels::call(
      "dropout", {x},
      {{"p", p}, {"training", training}, {"seed", static_cast<int64_t>(next_seed())}}, where)[0];
}

}  // namespace tandem
