// The op functions users call: one line each over the registry
// (kernels/registry.h), with the user's source location captured for errors.
//
//   using namespace tandem;
//   Tensor x = randn({4, 3});
//   Tensor y = relu(matmul(x, w) + b);      // Operators too.
//   Tensor loss = cross_entropy(y, labels);
//
// Every function returns at once: the work is pushed to the engine (see
// core/engine/engine.h). Shapes are known immediately; reading values waits.
// Errors in arguments (shapes, dtypes, attributes) throw tandem::Error at the
// call, naming the op and the calling line.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tandem {
namespace kernels {
struct OpDef;
}  // namespace kernels

using Dims = std::vector<int64_t>;
using Location = std::source_location;
#define TANDEM_HERE Location where = Location::current()

namespace detail {
// For the one-line functions of the elementwise ops below: the op named
// `name` (looked up once, by the caller's function-local static), and a call
// of it on x with float attributes.
const kernels::OpDef& find_op(const char* name);
Tensor call_unary(const kernels::OpDef& op, const Tensor& x,
                  std::initializer_list<std::pair<const char*, double>> params,
                  const Location& where);
}  // namespace detail

// ---- Elementwise, with NumPy broadcasting; operands must share a dtype. ----
Tensor add(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor sub(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor mul(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor div(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor pow(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor maximum(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor minimum(const Tensor& a, const Tensor& b, TANDEM_HERE);
// With a scalar, converted to the tensor's dtype: add(x, 1). The scalar must
// be a value of that dtype (add(int_tensor, 0.5) is an error, not + 0).
Tensor add(const Tensor& a, double b, TANDEM_HERE);
Tensor sub(const Tensor& a, double b, TANDEM_HERE);
Tensor mul(const Tensor& a, double b, TANDEM_HERE);
Tensor div(const Tensor& a, double b, TANDEM_HERE);
Tensor pow(const Tensor& a, double b, TANDEM_HERE);
// Comparisons give bool tensors.
Tensor eq(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor ne(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor lt(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor le(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor gt(const Tensor& a, const Tensor& b, TANDEM_HERE);
Tensor ge(const Tensor& a, const Tensor& b, TANDEM_HERE);

Tensor neg(const Tensor& x, TANDEM_HERE);
Tensor abs(const Tensor& x, TANDEM_HERE);
Tensor exp(const Tensor& x, TANDEM_HERE);
Tensor log(const Tensor& x, TANDEM_HERE);
Tensor sqrt(const Tensor& x, TANDEM_HERE);
Tensor rsqrt(const Tensor& x, TANDEM_HERE);
Tensor square(const Tensor& x, TANDEM_HERE);
Tensor tanh(const Tensor& x, TANDEM_HERE);
Tensor sigmoid(const Tensor& x, TANDEM_HERE);
Tensor relu(const Tensor& x, TANDEM_HERE);
Tensor leaky_relu(const Tensor& x, double alpha = 0.01, TANDEM_HERE);
Tensor gelu(const Tensor& x, TANDEM_HERE);
Tensor clip(const Tensor& x, double min, double max, TANDEM_HERE);
// Trigonometric, hyperbolic and rounding functions, elementwise (float32 and
// float64). round sends halves to the even neighbour, as torch.round does.
inline Tensor sin(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("sin");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor cos(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("cos");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor tan(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("tan");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor asin(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("asin");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor acos(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("acos");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor atan(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("atan");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor sinh(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("sinh");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor cosh(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("cosh");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor asinh(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("asinh");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor acosh(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("acosh");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor atanh(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("atanh");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor floor(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("floor");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor ceil(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("ceil");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor round(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("round");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor trunc(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("trunc");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor reciprocal(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("reciprocal");
  return detail::call_unary(op, x, {}, where);
}
// Activations, as torch.nn.functional's (float32 and float64).
inline Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("softplus");
  return detail::call_unary(op, x, {{"beta", beta}, {"threshold", threshold}}, where);
}
inline Tensor softsign(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("softsign");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor elu(const Tensor& x, double alpha = 1.0, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("elu");
  return detail::call_unary(op, x, {{"alpha", alpha}}, where);
}
inline Tensor selu(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("selu");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor celu(const Tensor& x, double alpha = 1.0, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("celu");
  return detail::call_unary(op, x, {{"alpha", alpha}}, where);
}
inline Tensor hardsigmoid(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("hardsigmoid");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor hardswish(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("hardswish");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor mish(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("mish");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor silu(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("silu");
  return detail::call_unary(op, x, {}, where);
}
// Tests (float32 and float64 in, bool out) and logic: logical_not takes any
// dtype and gives x == 0; bitwise_not takes integers and bool.
inline Tensor isnan(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("isnan");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor isinf(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("isinf");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor logical_not(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("logical_not");
  return detail::call_unary(op, x, {}, where);
}
inline Tensor bitwise_not(const Tensor& x, TANDEM_HERE) {
  static const kernels::OpDef& op = detail::find_op("bitwise_not");
  return detail::call_unary(op, x, {}, where);
}
Tensor cast(const Tensor& x, DType dtype, TANDEM_HERE);
// cond ? a : b, elementwise, broadcasting all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, TANDEM_HERE);

// ---- Reductions: over `axes` (all when empty). ----
Tensor sum(const Tensor& x, const Dims& axes = {}, bool keepdims = false, TANDEM_HERE);
Tensor mean(const Tensor& x, const Dims& axes = {}, bool keepdims = false, TANDEM_HERE);
Tensor prod(const Tensor& x, const Dims& axes = {}, bool keepdims = false, TANDEM_HERE);
Tensor max(const Tensor& x, const Dims& axes = {}, bool keepdims = false, TANDEM_HERE);
Tensor min(const Tensor& x, const Dims& axes = {}, bool keepdims = false, TANDEM_HERE);
// Bessel-corrected by default, like torch.var.
Tensor var(const Tensor& x, const Dims& axes = {}, bool keepdims = false, int64_t correction = 1,
           TANDEM_HERE);
Tensor argmax(const Tensor& x, int64_t axis = -1, bool keepdims = false, TANDEM_HERE);

// ---- Running sums and products along an axis, as torch.cumsum; exclusive
// leaves x[i] out of out[i] (starting from 0 or 1), reverse runs from the
// end (ONNX CumSum's attributes). ----
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false,
              TANDEM_HERE);
Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false,
               TANDEM_HERE);

// ---- Ordering along an axis: stable, NaN largest. ----
struct ValuesAndIndices {
  Tensor values;
  Tensor indices;  // int64 positions along the axis.
};
ValuesAndIndices sort(const Tensor& x, int64_t axis = -1, bool descending = false, TANDEM_HERE);
// The positions sort would order x by.
Tensor argsort(const Tensor& x, int64_t axis = -1, bool descending = false, TANDEM_HERE);
// The k largest (or smallest) along `axis`, in order; ties go to the smaller position.
ValuesAndIndices topk(const Tensor& x, int64_t k, int64_t axis = -1, bool largest = true,
                      TANDEM_HERE);

// ---- Shapes (these copy: a result never aliases its input). ----
Tensor reshape(const Tensor& x, const Dims& shape, TANDEM_HERE);
Tensor flatten(const Tensor& x, int64_t start_axis = 1, int64_t end_axis = -1, TANDEM_HERE);
// Reverses the axes when `perm` is empty.
Tensor transpose(const Tensor& x, const Dims& perm = {}, TANDEM_HERE);
Tensor concat(const std::vector<Tensor>& xs, int64_t axis = 0, TANDEM_HERE);
Tensor stack(const std::vector<Tensor>& xs, int64_t axis = 0, TANDEM_HERE);
std::vector<Tensor> split(const Tensor& x, const Dims& sizes, int64_t axis = 0, TANDEM_HERE);
Tensor slice(const Tensor& x, int64_t axis, int64_t begin, int64_t end, int64_t step = 1,
             TANDEM_HERE);
// Rows `indices` (int64) of x along `axis`.
Tensor take(const Tensor& x, const Tensor& indices, int64_t axis = 0, TANDEM_HERE);
// Indexing by int64 tensors, whose entries may count from the end (-1 is
// the last position); one out of range is an error naming it.
// out[p] = x[p with its `axis` coordinate replaced by indices[p]], shaped like
// indices (torch.gather, ONNX GatherElements).
Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis, TANDEM_HERE);
// x with src[p] written at (scatter) or added to (scatter_add) the position
// gather would read for p; src is shaped like indices. A position written
// twice by scatter keeps the last write on the CPU, either on a GPU.
Tensor scatter(const Tensor& x, const Tensor& indices, const Tensor& src, int64_t axis,
               TANDEM_HERE);
Tensor scatter_add(const Tensor& x, const Tensor& indices, const Tensor& src, int64_t axis,
                   TANDEM_HERE);
// Slices of x at index tuples, the last axis of indices; the first
// `batch_dims` axes of both are batch axes (ONNX GatherND).
Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims = 0, TANDEM_HERE);
// x with `updates` added at the slices gather_nd would read (ONNX ScatterND, reduction add).
Tensor scatter_nd_add(const Tensor& x, const Tensor& indices, const Tensor& updates,
                      int64_t batch_dims = 0, TANDEM_HERE);
// indices as one-hot vectors along a new last axis of `num_classes`.
Tensor one_hot(const Tensor& indices, int64_t num_classes, DType dtype = DType::kInt64,
               TANDEM_HERE);
// `pads` holds (before, after) for each axis, outermost first.
Tensor pad(const Tensor& x, const Dims& pads, double value = 0, TANDEM_HERE);
// The same in a mode, as torch's F.pad: "constant" (with value), "reflect"
// (mirrored about the edge, which is not repeated; each pad below the axis's
// size), "replicate" (the edge repeated) or "circular" (wrapped around).
Tensor pad(const Tensor& x, const Dims& pads, std::string_view mode, double value = 0, TANDEM_HERE);
Tensor expand(const Tensor& x, const Dims& shape, TANDEM_HERE);
// x [N, C, spatial...] (1 to 3 spatial axes) resized to `size`, as torch's
// F.interpolate with a size: mode "nearest", or "linear" / "bilinear" /
// "trilinear" (one name per spatial rank, or "linear" for any), with
// align_corners (linear only).
Tensor interpolate(const Tensor& x, const Dims& size, std::string_view mode = "nearest",
                   bool align_corners = false, TANDEM_HERE);

// ---- Creation, on the CPU unless told otherwise. Random ops draw a seed
// from the global generator; the same seed gives the same values on every
// device. ----
// A copy of x on `device` (x itself when it is there already); gradients
// flow back to x's device. Also x.to(device).
Tensor to(const Tensor& x, Device device, TANDEM_HERE);
// Moves the leaf tensor `x` itself to `device`: `x`, and every handle that
// shares it (a module's member, its parameters(), an optimizer's list), then
// refers to a copy on `device` made by the to_device op outside autograd. It
// is assign_ across devices, for Module::to and optimizer state (see Note
// [Moving a module between devices] in eager/nn/module.h): `x` keeps its
// autograd state, so a parameter stays a leaf with its requires_grad, and an
// accumulated grad() moves with it. No-op when `x` is there already. Throws
// tandem::Error for a non-leaf (moving it would cut its graph) and while a
// function is being traced (hybridize), which cannot record a rebinding.
void move_to_(const Tensor& x, Device device, TANDEM_HERE);

Tensor zeros(const Dims& shape, DType dtype = DType::kFloat32, Device device = Device::cpu(),
             TANDEM_HERE);
Tensor ones(const Dims& shape, DType dtype = DType::kFloat32, Device device = Device::cpu(),
            TANDEM_HERE);
Tensor full(const Dims& shape, double value, DType dtype = DType::kFloat32,
            Device device = Device::cpu(), TANDEM_HERE);
Tensor arange(double start, double stop, double step = 1, DType dtype = DType::kFloat32,
              Device device = Device::cpu(), TANDEM_HERE);
Tensor rand(const Dims& shape, DType dtype = DType::kFloat32, Device device = Device::cpu(),
            TANDEM_HERE);
Tensor randn(const Dims& shape, DType dtype = DType::kFloat32, Device device = Device::cpu(),
             TANDEM_HERE);
// Seeds the global generator: the same seed gives the same random ops.
void manual_seed(uint64_t seed);
// The next seed from the global generator (what rand and friends use).
uint64_t next_seed();
// The generator's state: manual_seed(random_state()) later replays the same
// seeds from here.
uint64_t random_state();

// ---- Neural-network ops. ----
Tensor matmul(const Tensor& a, const Tensor& b, TANDEM_HERE);
// x W^T + b, with W of shape [out, in] as in torch.nn.Linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, TANDEM_HERE);
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Dims& stride = {1, 1}, const Dims& padding = {0, 0},
              const Dims& dilation = {1, 1}, int64_t groups = 1, TANDEM_HERE);
// The transposed convolution (conv2d's adjoint, plus bias), as torch's
// F.conv_transpose2d: weight [in, out / groups, kH, kW].
Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Dims& stride = {1, 1}, const Dims& padding = {0, 0},
                        const Dims& output_padding = {0, 0}, int64_t groups = 1,
                        const Dims& dilation = {1, 1}, TANDEM_HERE);
// softmax(q k^T * scale + mask) v, with dropout on the weights, in one
// blocked kernel that keeps no [L, S] weights for the backward: the op
// behind nn::scaled_dot_product_attention, which checks its arguments the
// way torch does and calls this where it applies (call that one). query
// [..., L, E], key [..., S, E], value [..., S, Ev] share their leading axes;
// mask is undefined, or has query's rank with each axis 1 or the scores'
// ([..., L, S]): bool (true: may attend) or of query's dtype (added);
// causal keeps key j <= query i. float32 and float64. With heads > 0,
// query, key and value are [N, L, heads, E] instead (a [batch, seq, embed]
// tensor reshaped, so that a multi-head layer needs no transposes), the
// output [N, L, heads, Ev], and the mask is laid out as for [N, heads, L, E].
Tensor fused_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                       const Tensor& mask, bool causal, double scale, double dropout_p,
                       int64_t heads = 0, TANDEM_HERE);
// The recurrences of nn::RNN (tanh or relu), nn::LSTM and nn::GRU.
enum class RecurrentKind { kRnnTanh, kRnnRelu, kLstm, kGru };
// One recurrent layer in one direction over a whole sequence, in one op
// (rnn_tanh, rnn_relu, lstm or gru): the recurrence behind nn::RNN, LSTM
// and GRU (use those). projected = x W_ih^T + b_ih [batch, seq, gates *
// hidden], gates in torch's order (LSTM: input, forget, cell, output; GRU:
// reset, update, new); h0 (and for LSTM c0) [batch, hidden] or undefined
// for zeros; `reverse` runs from the last step. Returns the output at every
// step [batch, seq, hidden] and the final h (and for LSTM c).
std::vector<Tensor> recurrent_layer(RecurrentKind kind, const Tensor& projected,
                                    const Tensor& weight_hh, const Tensor& bias_hh,
                                    const Tensor& h0, const Tensor& c0, bool reverse, TANDEM_HERE);
// Windows read kernel positions `dilation` apart per axis (torch's
// dilation); one that would read padding alone is an Error.
Tensor max_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride = {},
                  const Dims& padding = {0, 0}, const Dims& dilation = {1, 1}, TANDEM_HERE);
// max_pool2d's values and, as torch's return_indices, where each came from:
// int64 offsets within the input plane (iy * W + ix), the first maximum of
// each window in row-major order (a NaN before any number). max_unpool2d
// (eager/composite_ops.h) puts values back there.
ValuesAndIndices max_pool2d_with_indices(const Tensor& x, const Dims& kernel,
                                         const Dims& stride = {}, const Dims& padding = {0, 0},
                                         const Dims& dilation = {1, 1}, TANDEM_HERE);
Tensor avg_pool2d(const Tensor& x, const Dims& kernel, const Dims& stride = {},
                  const Dims& padding = {0, 0}, TANDEM_HERE);
Tensor adaptive_avg_pool2d(const Tensor& x, const Dims& output_size, TANDEM_HERE);
Tensor softmax(const Tensor& x, int64_t axis = -1, TANDEM_HERE);
Tensor log_softmax(const Tensor& x, int64_t axis = -1, TANDEM_HERE);
// Mean over the batch by default; targets are int64 class indices.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0,
                     const std::string& reduction = "mean", TANDEM_HERE);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const std::string& reduction = "mean", TANDEM_HERE);
Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& reduction = "mean",
                TANDEM_HERE);
// Rows of `weight` picked by int64 `indices`, each in [0, rows): -1 is out of
// range (an error when the values are read), not the last row.
Tensor embedding(const Tensor& weight, const Tensor& indices, TANDEM_HERE);
// Outputs of batch_norm: y, and the batch's mean and (biased) variance.
std::vector<Tensor> batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& running_mean, const Tensor& running_var, bool training,
                               double eps = 1e-5, TANDEM_HERE);
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                  int64_t normalized_axes = 1, double eps = 1e-5, TANDEM_HERE);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when
// training; the identity otherwise.
Tensor dropout(const Tensor& x, double p, bool training, TANDEM_HERE);

// ---- Operators. ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

#undef TANDEM_HERE

}  // namespace tandem
