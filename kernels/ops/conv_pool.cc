// 2-D convolution and pooling over NCHW tensors: conv2d (with stride,
// padding, dilation and groups), max_pool2d, avg_pool2d, adaptive_avg_pool2d,
// and their backward ops.
//
// The gradients are ordinary registered ops (conv2d_backward_data,
// conv2d_backward_weight, max_pool2d_backward, avg_pool2d_backward,
// adaptive_avg_pool2d_backward), not differentiable themselves, so a traced
// backward is a graph of named ops like any other. They take the forward's
// attributes plus the shape they cannot infer ("input_shape" or
// "weight_shape").
//
// Conventions, as in PyTorch: output size floor((in + 2 pad - dilation (k-1)
// - 1) / stride) + 1 (no ceil mode); pooling padding at most half the kernel;
// max pooling ignores padding and takes a dilation (a window reads every
// dilation-th element; one that would read padding alone is refused); avg_pool2d counts padded
// zeros in the divisor (count_include_pad = true, PyTorch's default), so every window divides by kH
// * kW; adaptive windows are [floor(i H / oh), ceil((i + 1) H / oh)). max_pool2d_backward
// recomputes the argmax (the first maximum of each window in row-major order), which keeps it
// deterministic and needs no saved indices.
//
// float32 conv2d and the conv backward ops run on oneDNN (in the blocked
// layouts oneDNN picks, reordered from and to the tensors' NCHW/OIHW; Note
// [Blocked layouts] in kernels/cpu/onednn.h), and so do max_pool2d and
// avg_pool2d forward where oneDNN has a JIT kernel for them (Note [oneDNN's
// reference pooling]); the rest (and all float64) are plain loops.
//
// conv2d also takes "activation" and "alpha", which only activation fusion
// sets (Note [Fused activation] in kernels/cpu/onednn.h).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string_view>

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

using Pair = std::array<int64_t, 2>;

std::vector<int64_t> ints(const Pair& p) { return {p[0], p[1]}; }

// A (height, width) attribute; every value at least `min`.
Pair pair_attr(const Attrs& attrs, const char* name, int64_t min) {
  const std::vector<int64_t>& v = attrs.get_ints(name);
  TANDEM_CHECK(v.size() == 2, name, " must have 2 values (height, width), got ", attr_to_string(v));
  TANDEM_CHECK(v[0] >= min && v[1] >= min, name, " must be ",
               min == 0 ? "non-negative" : "positive", ", got ", attr_to_string(v));
  return {v[0], v[1]};
}

void check_nchw(const char* what, const Shape& s) {
  TANDEM_CHECK(s.rank() == 4, what, " must be [batch, channels, height, width], got shape ",
               s.to_string());
}

Shape shape_attr(const Attrs& attrs, const char* name) {
  const std::vector<int64_t>& v = attrs.get_ints(name);
  TANDEM_CHECK(v.size() == 4 && std::all_of(v.begin(), v.end(), [](int64_t d) { return d >= 0; }),
               name, " must be 4 non-negative sizes, got ", attr_to_string(v));
  return Shape(absl::Span<const int64_t>(v));
}

// The output extent of a window sweep along one axis: `in` input positions
// padded by `pad` on each side, windows of `extent` every `stride`. Checks
// that the window fits; every sum is checked (Note [Checked size
// arithmetic]), since padding and dilation are attributes a model file may
// set to anything. The kernels' index arithmetic stays within these sums.
int64_t sweep(const char* what, int64_t in, int64_t pad, int64_t extent, int64_t stride,
              const Shape& input) {
  auto shape = [&] { return input.to_string(); };
  const int64_t padded = checked_add(in, checked_mul(2, pad, "twice the padding ", pad),
                                     "the padded input of ", shape);
  TANDEM_CHECK(extent <= padded, what, " (", extent, ") is larger than the padded input (", in,
               " + 2 * ", pad, ") of shape ", input.to_string());
  return (padded - extent) / stride + 1;
}

// The extent of a dilated kernel, dilation * (kernel - 1) + 1.
int64_t dilated(int64_t kernel, int64_t dilation, const char* what) {
  return checked_add(checked_mul(dilation, kernel - 1, "the dilated ", what), 1, "the dilated ",
                     what);
}

// conv2d

struct Conv {
  int64_t n = 0, c = 0, h = 0, w = 0;  // Input.
  int64_t o = 0, kh = 0, kw = 0;       // Weight [o, c / groups, kh, kw].
  int64_t groups = 1;
  Pair stride{}, padding{}, dilation{};
  int64_t oh = 0, ow = 0;  // Output.
  Shape out() const { return Shape{n, o, oh, ow}; }
};

Conv conv_geometry(const Shape& x, const Shape& w, const Attrs& attrs) {
  check_nchw("x", x);
  TANDEM_CHECK(w.rank() == 4, "weight must be [out_channels, in_channels / groups, kH, kW], got ",
               "shape ", w.to_string());
  Conv g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  g.groups = attrs.get_int("groups");
  g.stride = pair_attr(attrs, "stride", 1);
  g.padding = pair_attr(attrs, "padding", 0);
  g.dilation = pair_attr(attrs, "dilation", 1);
  TANDEM_CHECK(g.groups >= 1, "groups must be positive, got ", g.groups);
  TANDEM_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, "groups = ", g.groups,
               " must divide both the input channels (", g.c, ", x of shape ", x.to_string(),
               ") and the output channels (", g.o, ")");
  const int64_t expected = checked_mul(w[1], g.groups, "the input channels of groups = ", g.groups,
                                       " of weight shape ", w.to_string());
  TANDEM_CHECK(expected == g.c, "weight of shape ", w.to_string(), " expects ", expected,
               " input channels (", w[1], " per group x ", g.groups, " groups), but x of shape ",
               x.to_string(), " has ", g.c);
  TANDEM_CHECK(g.kh >= 1 && g.kw >= 1, "kernel of weight shape ", w.to_string(), " is empty");
  g.oh = sweep("dilated kernel height", g.h, g.padding[0],
               dilated(g.kh, g.dilation[0], "kernel height"), g.stride[0], x);
  g.ow = sweep("dilated kernel width", g.w, g.padding[1],
               dilated(g.kw, g.dilation[1], "kernel width"), g.stride[1], x);
  return g;
}

void check_same_float(absl::Span<const TensorMeta> in) {
  check_floating("input", in[0].dtype);
  for (size_t i = 1; i < in.size(); ++i) {
    TANDEM_CHECK(in[i].dtype == in[0].dtype, "dtype mismatch: input ", i, " is ",
                 dtype_name(in[i].dtype), ", input 0 is ", dtype_name(in[0].dtype));
  }
}

TensorMetas infer_conv2d(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in);
  onednn::fused_activation(attrs);  // Checks the name.
  Conv g = conv_geometry(in[0].shape, in[1].shape, attrs);
  TANDEM_CHECK(in[2].shape == Shape{g.o}, "bias must be [", g.o, "], got shape ",
               in[2].shape.to_string());
  return {{g.out(), in[0].dtype}};
}

// oneDNN descriptors for one convolution: the tensors' plain layouts, and
// what the primitive is described with (format_tag::any for the data and
// weights where blocked layouts pay; Note [Blocked layouts] in
// kernels/cpu/onednn.h).
struct ConvDescs {
  dnnl::memory::desc src, weights, bias, dst;
  dnnl::memory::desc any_src, any_weights, any_dst;
  dnnl::memory::dims strides, dilates, padding;
};

ConvDescs conv_descs(const Conv& g, bool blocked = true) {
  using namespace onednn;
  using tag = dnnl::memory::format_tag;
  ConvDescs d;
  d.src = desc({g.n, g.c, g.h, g.w}, tag::nchw);
  d.weights = g.groups == 1
                  ? desc({g.o, g.c, g.kh, g.kw}, tag::oihw)
                  : desc({g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw}, tag::goihw);
  d.bias = desc({g.o}, tag::x);
  d.dst = desc({g.n, g.o, g.oh, g.ow}, tag::nchw);
  auto any = [&](const dnnl::memory::desc& plain) {
    return blocked ? desc(plain.dims(), tag::any) : plain;
  };
  d.any_src = any(d.src);
  d.any_weights = any(d.weights);
  d.any_dst = any(d.dst);
  d.strides = {g.stride[0], g.stride[1]};
  d.dilates = {g.dilation[0] - 1, g.dilation[1] - 1};  // oneDNN counts the gaps.
  d.padding = {g.padding[0], g.padding[1]};
  return d;
}

dnnl::convolution_forward::desc conv_forward_desc(const ConvDescs& d, dnnl::prop_kind prop) {
  return dnnl::convolution_forward::desc(prop, dnnl::algorithm::convolution_direct, d.any_src,
                                         d.any_weights, d.bias, d.any_dst, d.strides, d.dilates,
                                         d.padding, d.padding);
}

// The forward convolution (Note [Primitive cache] in kernels/cpu/primitive_cache.h).
std::shared_ptr<const onednn::CachedPrimitive<dnnl::convolution_forward>> conv_forward(
    const ConvDescs& d, dnnl::prop_kind prop, const onednn::FusedActivation& activation = {}) {
  const dnnl::convolution_forward::desc op = conv_forward_desc(d, prop);
  return onednn::cached_primitive<dnnl::convolution_forward>(
      "convolution", onednn::PrimitiveKey().add(op.data).add(activation), [&] {
        return dnnl::convolution_forward::primitive_desc(op, onednn::post_op_attr(activation),
                                                         onednn::cpu_engine());
      });
}

// Calls f(y_index, x_index, w_index) for every product term y += x * w of
// the convolution (padding skipped).
template <class F>
void for_each_conv_term(const Conv& g, F f) {
  const int64_t opg = g.o / g.groups, cpg = g.c / g.groups;
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t c0 = (o / opg) * cpg;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          for (int64_t ci = 0; ci < cpg; ++ci) {
            for (int64_t ky = 0; ky < g.kh; ++ky) {
              const int64_t iy = oy * g.stride[0] - g.padding[0] + ky * g.dilation[0];
              if (iy < 0 || iy >= g.h) continue;
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t ix = ox * g.stride[1] - g.padding[1] + kx * g.dilation[1];
                if (ix < 0 || ix >= g.w) continue;
                f(((n * g.o + o) * g.oh + oy) * g.ow + ox,      // Output element.
                  ((n * g.c + c0 + ci) * g.h + iy) * g.w + ix,  // Input element.
                  ((o * cpg + ci) * g.kh + ky) * g.kw + kx);    // Weight element.
              }
            }
          }
        }
      }
    }
  }
}

bool nonempty(std::initializer_list<const Tensor*> tensors) {
  return std::all_of(tensors.begin(), tensors.end(),
                     [](const Tensor* t) { return t->numel() > 0; });
}

// Whether a convolution with output `y` and weight `w` [O, C / groups, kh, kw]
// is small enough to run on one thread (Note [Small primitives on one
// thread]): its multiply-adds.
bool conv_on_one_core(const Shape& y, const Shape& w) {
  return y.numel() * w[1] * w[2] * w[3] <= onednn::kOneThreadWork;
}

bool conv2d_on_one_core(const CallShapes& shapes) {
  return conv_on_one_core(*shapes.outputs[0], *shapes.inputs[1]);
}

void conv2d_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &b = c.inputs[2], &y = c.outputs[0];
  Conv g = conv_geometry(x.shape(), w.shape(), c.attrs);
  const onednn::FusedActivation activation = onednn::fused_activation(c.attrs);
  visit_floating(x.dtype(), [&]<class T>() {
    if (std::is_same_v<T, float> && nonempty({&x, &w, &y})) {
      const onednn::OneThread one_thread(conv_on_one_core(y.shape(), w.shape()));
      ConvDescs d = conv_descs(g);
      // forward_training even where nothing will differentiate: for
      // forward_inference oneDNN 2.6 picks brgconv with NHWC layouts, whose
      // reorders from and to our NCHW cost 2-3x those of nChw16c, and which
      // is 2x slower itself for a single input channel.
      const auto conv = conv_forward(d, dnnl::prop_kind::forward_training, activation);
      onednn::execute_in_layouts(conv->primitive, conv->pd,
                                 {{DNNL_ARG_SRC, &x, d.src},
                                  {DNNL_ARG_WEIGHTS, &w, d.weights},
                                  {DNNL_ARG_BIAS, &b, d.bias}},
                                 {{DNNL_ARG_DST, &y, d.dst}}, "convolution");
      return;
    }
    const T *px = x.data<T>(), *pw = w.data<T>(), *pb = b.data<T>();
    T* py = y.data<T>();
    const int64_t plane = g.oh * g.ow;
    for (int64_t i = 0; i < y.numel(); ++i) py[i] = pb[(i / plane) % g.o];
    for_each_conv_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { py[yi] += px[xi] * pw[wi]; });
    onednn::apply_activation(activation, py, y.numel());
  });
}

// conv2d_backward_data(grad_y, weight) -> grad_x; attrs + "input_shape".
TensorMetas infer_conv2d_backward_data(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in);
  Shape x = shape_attr(attrs, "input_shape");
  Conv g = conv_geometry(x, in[1].shape, attrs);
  TANDEM_CHECK(in[0].shape == g.out(), "grad_y must have the convolution's output shape ",
               g.out().to_string(), ", got ", in[0].shape.to_string());
  return {{x, in[0].dtype}};
}

void conv2d_backward_data_kernel(const KernelContext& c) {
  const Tensor &gy = c.inputs[0], &w = c.inputs[1], &gx = c.outputs[0];
  Conv g = conv_geometry(gx.shape(), w.shape(), c.attrs);
  visit_floating(gy.dtype(), [&]<class T>() {
    if (std::is_same_v<T, float> && nonempty({&gy, &w, &gx})) {
      // The blocked kernels compute grad_x in whole blocks of channels (16
      // with AVX-512, 8 with AVX2); below half a block of input channels per
      // group the padding makes them slower than gemm on the plain layouts
      // (AVX-512, 1 channel, batch 128, 28x28 -> 32: 2.5 ms against 0.5 ms),
      // above it faster (AVX2, LeNet-5's second convolution, 6 -> 16
      // channels, batch 64: 0.34 ms against 0.79 ms).
      ConvDescs d = conv_descs(g, /*blocked=*/g.c / g.groups >= onednn::channel_block() / 2);
      const dnnl::convolution_backward_data::desc op(dnnl::algorithm::convolution_direct, d.any_src,
                                                     d.any_weights, d.any_dst, d.strides, d.dilates,
                                                     d.padding, d.padding);
      const auto conv = onednn::cached_primitive<dnnl::convolution_backward_data>(
          "convolution backward data", onednn::PrimitiveKey().add(op.data), [&] {
            return dnnl::convolution_backward_data::primitive_desc(
                op, onednn::cpu_engine(), conv_forward(d, dnnl::prop_kind::forward_training)->pd);
          });
      onednn::execute_in_layouts(
          conv->primitive, conv->pd,
          {{DNNL_ARG_DIFF_DST, &gy, d.dst}, {DNNL_ARG_WEIGHTS, &w, d.weights}},
          {{DNNL_ARG_DIFF_SRC, &gx, d.src}}, "convolution backward data");
      return;
    }
    const T *pgy = gy.data<T>(), *pw = w.data<T>();
    T* pgx = gx.data<T>();
    parallel_for(gx.numel(), kCheapGrain,
                 [&](int64_t begin, int64_t end) { std::fill(pgx + begin, pgx + end, T{0}); });
    for_each_conv_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { pgx[xi] += pgy[yi] * pw[wi]; });
  });
}

// conv2d_backward_weight(x, grad_y) -> grad_weight, grad_bias; attrs + "weight_shape".
TensorMetas infer_conv2d_backward_weight(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in);
  Shape w = shape_attr(attrs, "weight_shape");
  Conv g = conv_geometry(in[0].shape, w, attrs);
  TANDEM_CHECK(in[1].shape == g.out(), "grad_y must have the convolution's output shape ",
               g.out().to_string(), ", got ", in[1].shape.to_string());
  return {{w, in[0].dtype}, {Shape{g.o}, in[0].dtype}};
}

void conv2d_backward_weight_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gy = c.inputs[1], &gw = c.outputs[0], &gb = c.outputs[1];
  Conv g = conv_geometry(x.shape(), gw.shape(), c.attrs);
  visit_floating(x.dtype(), [&]<class T>() {
    if (std::is_same_v<T, float> && nonempty({&x, &gy, &gw})) {
      ConvDescs d = conv_descs(g);
      const dnnl::convolution_backward_weights::desc op(dnnl::algorithm::convolution_direct,
                                                        d.any_src, d.any_weights, d.bias, d.any_dst,
                                                        d.strides, d.dilates, d.padding, d.padding);
      const auto conv = onednn::cached_primitive<dnnl::convolution_backward_weights>(
          "convolution backward weights", onednn::PrimitiveKey().add(op.data), [&] {
            return dnnl::convolution_backward_weights::primitive_desc(
                op, onednn::cpu_engine(), conv_forward(d, dnnl::prop_kind::forward_training)->pd);
          });
      onednn::execute_in_layouts(
          conv->primitive, conv->pd, {{DNNL_ARG_SRC, &x, d.src}, {DNNL_ARG_DIFF_DST, &gy, d.dst}},
          {{DNNL_ARG_DIFF_WEIGHTS, &gw, d.weights}, {DNNL_ARG_DIFF_BIAS, &gb, d.bias}},
          "convolution backward weights");
      return;
    }
    const T *px = x.data<T>(), *pgy = gy.data<T>();
    T *pgw = gw.data<T>(), *pgb = gb.data<T>();
    std::fill(pgw, pgw + gw.numel(), T{0});
    std::fill(pgb, pgb + gb.numel(), T{0});
    const int64_t plane = g.oh * g.ow;
    for (int64_t i = 0; i < gy.numel(); ++i) pgb[(i / plane) % g.o] += pgy[i];
    for_each_conv_term(g, [&](int64_t yi, int64_t xi, int64_t wi) { pgw[wi] += pgy[yi] * px[xi]; });
  });
}

Attrs with_shape(Attrs attrs, const char* name, const Shape& shape) {
  attrs.set(name, std::vector<int64_t>(shape.begin(), shape.end()));
  return attrs;
}

// The gradient of a fused activation would need the pre-activation values,
// which the fused conv never writes; activation fusion only fuses where
// nothing reads them, so no backward pass asks.
std::vector<Tensor> conv2d_gradient(const GradContext& c) {
  const std::string& activation = c.attrs.get_string("activation");
  TANDEM_CHECK(activation == "none", "conv2d with activation '", activation,
               "' has no gradient: fused activation is for inference graphs; differentiate "
               "conv2d followed by the ",
               activation, " op instead");
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grad_outputs[0];
  // The backward ops take the convolution's geometry, not the activation.
  const Attrs attrs = onednn::without_activation(c.attrs);
  // A first layer's x is data: its backward-data convolution is skipped.
  Tensor grad_x = c.needs_grad(0) ? nested_call1("conv2d_backward_data", {g, w},
                                                 with_shape(attrs, "input_shape", x.shape()))
                                  : Tensor();
  // One op gives both (oneDNN's backward-weights primitive computes them together).
  std::vector<Tensor> grad_wb =
      nested_call("conv2d_backward_weight", {x, g}, with_shape(attrs, "weight_shape", w.shape()));
  return {grad_x, grad_wb[0], grad_wb[1]};
}

// conv_transpose2d(x, weight, bias): the adjoint of conv2d from the output's
// shape to x's (what conv2d_backward_data computes), plus the bias, with
// torch's weight layout [in_channels, out_channels / groups, kH, kW]. Output
// size per axis: (in - 1) stride - 2 padding + dilation (k - 1) +
// output_padding + 1, where output_padding (below the stride) picks among
// the sizes a strided conv2d maps back to `in`.

TensorMetas infer_conv_transpose2d(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in);
  const Shape &x = in[0].shape, &w = in[1].shape;
  check_nchw("x", x);
  TANDEM_CHECK(w.rank() == 4 && w[0] == x[1], "weight must be [in_channels = ", x[1],
               ", out_channels / groups, kH, kW] for x of shape ", x.to_string(), ", got shape ",
               w.to_string());
  const int64_t groups = attrs.get_int("groups");
  TANDEM_CHECK(groups >= 1 && x[1] % groups == 0, "groups = ", groups,
               " must be positive and divide the input channels (", x[1], ")");
  const Pair stride = pair_attr(attrs, "stride", 1), padding = pair_attr(attrs, "padding", 0),
             dilation = pair_attr(attrs, "dilation", 1),
             output_padding = pair_attr(attrs, "output_padding", 0);
  Shape::Dims y{x[0], checked_mul(w[1], groups, "the output channels of weight ", w.to_string())};
  for (int k = 0; k < 2; ++k) {
    // torch also takes output_padding below the dilation at stride 1, where
    // the extra rows hold the bias alone; not supported here.
    TANDEM_CHECK(output_padding[k] < stride[k], "output_padding ",
                 attr_to_string(ints(output_padding)), " must be below the stride ",
                 attr_to_string(ints(stride)));
    auto what = [&] { return x.to_string(); };
    const int64_t swept = checked_mul(x[k + 2] - 1, stride[k], "the strided input of ", what);
    const int64_t extent = dilated(w[k + 2], dilation[k], "kernel");
    // Padding is cut from the output: a difference of non-negative sums,
    // which cannot overflow.
    const int64_t size = checked_add(checked_add(swept, extent, "the output of ", what),
                                     output_padding[k], "the output of ", what) -
                         checked_mul(2, padding[k], "twice the padding ", padding[k]);
    TANDEM_CHECK(x[k + 2] >= 1 && size >= 1, "the transposed convolution of x of shape ",
                 x.to_string(), " gives output size ", size, " on axis ", k + 2,
                 "; it must be at least 1");
    y.push_back(size);
  }
  // The convolution it is the adjoint of maps the output's shape back to x's.
  TANDEM_CHECK(conv_geometry(Shape(y), w, attrs).out() == x, "unreachable: inconsistent sizes");
  TANDEM_CHECK(in[2].shape == Shape{y[1]}, "bias must be [", y[1], "], got shape ",
               in[2].shape.to_string());
  return {{Shape(y), in[0].dtype}};
}

void conv_transpose2d_kernel(const KernelContext& c) {
  conv2d_backward_data_kernel(c);  // Reads x as grad_y and the weight; writes y as grad_x.
  const Tensor &b = c.inputs[2], &y = c.outputs[0];
  visit_floating(y.dtype(), [&]<class T>() {
    const T* pb = b.data<T>();
    T* py = y.data<T>();
    const int64_t plane = y.shape()[2] * y.shape()[3], channels = y.shape()[1];
    parallel_for(y.numel(), kCheapGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] += pb[(i / plane) % channels];
    });
  });
}

// Its adjoint is conv2d: x's gradient is the convolution of grad_y, and the
// weight's is conv2d's weight gradient with the roles of x and y swapped.
std::vector<Tensor> conv_transpose2d_gradient(const GradContext& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grad_outputs[0];
  Attrs conv;
  for (const char* name : {"stride", "padding", "dilation", "groups"}) {
    conv.set(name, *c.attrs.find(name));
  }
  Tensor grad_x =
      c.needs_grad(0)
          ? nested_call1(conv2d_op(), {g, w, zeros(Shape{w.shape()[0]}, w.dtype(), w.device())},
                         conv)
          : Tensor();
  Tensor grad_w =
      nested_call("conv2d_backward_weight", {g, x}, with_shape(conv, "weight_shape", w.shape()))[0];
  Tensor grad_b = nested_call1(sum_op(), {g}, {{"axes", std::vector<int64_t>{0, 2, 3}}});
  return {grad_x, grad_w, grad_b};
}

// Pooling

// The input positions window o reads along one axis: begin, begin + step,
// ... below end, clipped to [0, in). Empty when begin >= end.
struct WindowSpan {
  int64_t begin, end, step;
};

WindowSpan window_span(int64_t o, int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                       int64_t dilation) {
  const int64_t start = o * stride - padding;
  // The first tap at or after 0: start + ceil(-start / dilation) dilation.
  const int64_t begin = start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
  return {begin, std::min(start + (kernel - 1) * dilation + 1, in), dilation};
}

struct Pool {
  int64_t n = 0, c = 0, h = 0, w = 0;
  Pair kernel{}, stride{}, padding{};
  Pair dilation{1, 1};  // max pooling's; average pooling has none.
  int64_t oh = 0, ow = 0;
  Shape in() const { return Shape{n, c, h, w}; }
  Shape out() const { return Shape{n, c, oh, ow}; }
};

Pool pool_geometry(const Shape& x, const Attrs& attrs) {
  check_nchw("x", x);
  Pool p;
  p.n = x[0], p.c = x[1], p.h = x[2], p.w = x[3];
  p.kernel = pair_attr(attrs, "kernel", 1);
  p.stride = attrs.get_ints("stride").empty() ? p.kernel : pair_attr(attrs, "stride", 1);
  p.padding = pair_attr(attrs, "padding", 0);
  if (attrs.has("dilation")) p.dilation = pair_attr(attrs, "dilation", 1);
  // An empty image would leave windows made of padding alone, which have no
  // maximum (PyTorch refuses them too); an empty batch is fine.
  TANDEM_CHECK(p.h > 0 && p.w > 0, "x has shape ", x.to_string(),
               "; pooling needs a height and width of at least 1");
  // padding <= kernel / 2, written so that no padding overflows.
  TANDEM_CHECK(p.padding[0] <= p.kernel[0] / 2 && p.padding[1] <= p.kernel[1] / 2, "padding ",
               attr_to_string(ints(p.padding)), " must be at most half the kernel ",
               attr_to_string(ints(p.kernel)));
  // The divisor of avg_pool2d; the windows' loops stay within the input.
  checked_mul(p.kernel[0], p.kernel[1], "the kernel area of ",
              [&] { return attr_to_string(ints(p.kernel)); });
  p.oh = sweep("kernel height", p.h, p.padding[0], dilated(p.kernel[0], p.dilation[0], "kernel"),
               p.stride[0], x);
  p.ow = sweep("kernel width", p.w, p.padding[1], dilated(p.kernel[1], p.dilation[1], "kernel"),
               p.stride[1], x);
  // Undilated windows always reach the input; dilated ones can fall on
  // padding alone, leaving no maximum.
  for (int axis : {0, 1}) {
    const int64_t out = axis == 0 ? p.oh : p.ow, in = x[2 + axis];
    for (int64_t o = 0; o < out && p.dilation[axis] > 1; ++o) {
      const WindowSpan span =
          window_span(o, in, p.kernel[axis], p.stride[axis], p.padding[axis], p.dilation[axis]);
      TANDEM_CHECK(span.begin < span.end, "window ", o, " along ", axis == 0 ? "height" : "width",
                   " reads padding alone (kernel ", attr_to_string(ints(p.kernel)), ", dilation ",
                   attr_to_string(ints(p.dilation)), ", padding ", attr_to_string(ints(p.padding)),
                   ", x of shape ", x.to_string(), ")");
    }
  }
  return p;
}

TensorMetas infer_pool(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("x", in[0].dtype);
  return {{pool_geometry(in[0].shape, attrs).out(), in[0].dtype}};
}

// Whether a pooling of x into y runs on one thread (Note [Small primitives on
// one thread]): its elements, each read about once.
bool pool_on_one_core(const Shape& x, const Shape& y) {
  return x.numel() + y.numel() <= onednn::kOneThreadWork;
}

bool pool2d_on_one_core(const CallShapes& shapes) {
  return pool_on_one_core(*shapes.inputs[0], *shapes.outputs[0]);
}

// Note [oneDNN's reference pooling]
// oneDNN serves every pooling, but for NCHW tensors on some CPUs only with a
// reference implementation ("simple_nchw"): on a 2-core AVX2 machine it took
// 3.3 ms for LeNet-5's first 2x2 pooling at batch 64 (300k inputs), a third
// of the training step, where a plain loop over the windows takes ~0.1 ms.
// So pooling runs on oneDNN only where oneDNN has a JIT kernel for it, and
// otherwise on the loops below.

// Pools x into y with oneDNN if it has a JIT kernel for this pooling; returns
// whether it did.
bool pool_onednn(const Pool& p, dnnl::algorithm algorithm, const Tensor& x, const Tensor& y) {
  using namespace onednn;
  if (p.dilation != Pair{1, 1}) return false;  // The v1 pooling descriptor has none.
  const OneThread one_thread(pool_on_one_core(x.shape(), y.shape()));
  dnnl::memory::desc src = desc(dims_of(p.in()), dnnl::memory::format_tag::nchw);
  dnnl::memory::desc dst = desc(dims_of(p.out()), dnnl::memory::format_tag::nchw);
  dnnl::memory::dims stride = {p.stride[0], p.stride[1]}, kernel = {p.kernel[0], p.kernel[1]},
                     padding = {p.padding[0], p.padding[1]};
  const dnnl::pooling_forward::desc op(dnnl::prop_kind::forward_inference, algorithm, src, dst,
                                       stride, kernel, padding, padding);
  const auto pool = cached_primitive<dnnl::pooling_forward>(
      "pooling", PrimitiveKey().add(op.data),
      [&] { return dnnl::pooling_forward::primitive_desc(op, cpu_engine()); });
  if (!std::string_view(pool->pd.impl_info_str()).starts_with("jit")) return false;
  execute(pool->primitive, {{DNNL_ARG_SRC, wrap(x, src)}, {DNNL_ARG_DST, wrap(y, dst)}}, "pooling");
  return true;
}

// Calls f(plane) for every plane (one image's one channel), with the planes
// split across the cores: a window reads and writes only its own plane, so
// `f` may write there without locks.
template <class F>
void for_each_plane(const Pool& p, F f) {
  // About kCheapGrain input elements per share of the work.
  const int64_t planes_per_grain =
      std::max<int64_t>(1, kCheapGrain / std::max<int64_t>(1, p.h * p.w));
  parallel_for(p.n * p.c, planes_per_grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) f(plane);
  });
}

// Calls f(out, rows, columns) for every window of one plane: `out` is the
// window's output within the plane, the spans the positions it reads.
template <class F>
void for_each_window_in_plane(const Pool& p, F f) {
  for (int64_t oy = 0; oy < p.oh; ++oy) {
    const WindowSpan rows =
        window_span(oy, p.h, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0]);
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      f(oy * p.ow + ox, rows,
        window_span(ox, p.w, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1]));
    }
  }
}

template <class T>
bool any_nan(const T* data, int64_t count) {
  unsigned nan = 0;  // No early exit, and not a bool, so that the loop vectorizes.
  for (int64_t i = 0; i < count; ++i) nan |= std::isnan(data[i]);
  return nan != 0;
}

// The offset (within its plane) of the first maximum of a window; NaN wins.
// kNanAware = false is for planes known to hold no NaN: its plain comparison
// compiles to branch-free selects, while the NaN-aware one branches on the
// data, and on random activations those branches mispredict so often that
// the backward pass of a 2x2 pooling takes ~4x as long.
template <bool kNanAware, class T>
int64_t window_argmax(const T* plane, int64_t width, const WindowSpan& rows,
                      const WindowSpan& columns) {
  int64_t best = rows.begin * width + columns.begin;
  T best_value = plane[best];
  for (int64_t iy = rows.begin; iy < rows.end; iy += rows.step) {
    for (int64_t ix = columns.begin; ix < columns.end; ix += columns.step) {
      const T v = plane[iy * width + ix];
      const bool take =
          kNanAware ? v > best_value || (std::isnan(v) && !std::isnan(best_value)) : v > best_value;
      best = take ? iy * width + ix : best;
      best_value = take ? v : best_value;
    }
  }
  return best;
}

// Calls f(out, argmax) for every window of one plane `x` (argmax: the offset
// of the window's first maximum within the plane).
template <class T, class F>
void for_each_window_argmax(const Pool& p, const T* x, F f) {
  auto each = [&]<bool kNanAware>() {
    for_each_window_in_plane(p,
                             [&](int64_t out, const WindowSpan& rows, const WindowSpan& columns) {
                               f(out, window_argmax<kNanAware>(x, p.w, rows, columns));
                             });
  };
  if (any_nan(x, p.h * p.w)) {
    each.template operator()<true>();
  } else {
    each.template operator()<false>();
  }
}

// Pools one plane: y = finish(combine(... combine(identity, x0) ..., xn)) over
// each window's inputs in row-major order. Without padding every window lies
// within the plane, and each (ky, kx) of the kernel is one pass over a row
// of outputs with a fixed stride, which the compiler vectorizes (a 2x2
// window by itself is too short to); with padding, window by window.
template <class T, class Combine, class Finish>
void pool_plane(const Pool& p, const T* x, T* y, T identity, Combine combine, Finish finish) {
  const bool no_padding = p.padding[0] == 0 && p.padding[1] == 0;
  if (no_padding && p.kernel == Pair{2, 2} && p.stride == Pair{2, 2} && p.dilation == Pair{1, 1}) {
    // The common 2x2 pooling: each window's four inputs in one pass over
    // the output row (its loads interleaved, which vectorizes), instead of a
    // pass per input: LeNet-5's poolings took a seventh of its inference.
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      const T* __restrict top = x + 2 * oy * p.w;
      const T* __restrict bottom = top + p.w;
      T* __restrict out = y + oy * p.ow;
      for (int64_t ox = 0; ox < p.ow; ++ox) {
        T acc = combine(identity, top[2 * ox]);
        acc = combine(acc, top[2 * ox + 1]);
        acc = combine(acc, bottom[2 * ox]);
        out[ox] = finish(combine(acc, bottom[2 * ox + 1]));
      }
    }
    return;
  }
  if (no_padding) {
    const int64_t stride = p.stride[1];
    for (int64_t oy = 0; oy < p.oh; ++oy) {
      T* __restrict out = y + oy * p.ow;
      std::fill(out, out + p.ow, identity);
      for (int64_t ky = 0; ky < p.kernel[0]; ++ky) {
        for (int64_t kx = 0; kx < p.kernel[1]; ++kx) {
          const T* __restrict in =
              x + (oy * p.stride[0] + ky * p.dilation[0]) * p.w + kx * p.dilation[1];
          for (int64_t ox = 0; ox < p.ow; ++ox) out[ox] = combine(out[ox], in[ox * stride]);
        }
      }
      for (int64_t ox = 0; ox < p.ow; ++ox) out[ox] = finish(out[ox]);
    }
    return;
  }
  for_each_window_in_plane(p, [&](int64_t out, const WindowSpan& rows, const WindowSpan& columns) {
    T acc = identity;
    for (int64_t iy = rows.begin; iy < rows.end; iy += rows.step) {
      for (int64_t ix = columns.begin; ix < columns.end; ix += columns.step) {
        acc = combine(acc, x[iy * p.w + ix]);
      }
    }
    y[out] = finish(acc);
  });
}

// The largest value of each window of one plane; NaN wins, as in
// window_argmax. Branch-free selects, like window_argmax<false>.
template <class T>
void max_pool_plane(const Pool& p, const T* x, T* y) {
  pool_plane(
      p, x, y, -std::numeric_limits<T>::infinity(),
      [](T best, T v) { return v > best || v != v ? v : best; }, [](T best) { return best; });
}

// The mean of each window of one plane, padding counted as zeros.
template <class T>
void avg_pool_plane(const Pool& p, const T* x, T* y) {
  const T divisor = static_cast<T>(p.kernel[0] * p.kernel[1]);
  pool_plane(
      p, x, y, T{0}, [](T sum, T v) { return sum + v; },
      [divisor](T sum) { return sum / divisor; });
}

// Pools x into y: on oneDNN where it has a JIT kernel (float32), else with
// pool_plane(p, x_plane, y_plane) over the planes (Note [oneDNN's reference
// pooling]).
template <class PoolPlane>
void pool2d(const KernelContext& c, dnnl::algorithm algorithm, PoolPlane pool_plane) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  Pool p = pool_geometry(x.shape(), c.attrs);
  if (y.numel() == 0) return;
  visit_floating(x.dtype(), [&]<class T>() {
    if (std::is_same_v<T, float> && pool_onednn(p, algorithm, x, y)) return;
    auto one_plane = [&](int64_t plane) {
      pool_plane(p, x.data<T>() + plane * p.h * p.w, y.data<T>() + plane * p.oh * p.ow);
    };
    if (pool_on_one_core(x.shape(), y.shape())) {
      // OpDef::one_core said so: no OpenMP team for this call.
      for (int64_t plane = 0; plane < p.n * p.c; ++plane) one_plane(plane);
    } else {
      for_each_plane(p, one_plane);
    }
  });
}

void max_pool2d_kernel(const KernelContext& c) {
  pool2d(c, dnnl::algorithm::pooling_max,
         [](const Pool& p, const auto* x, auto* y) { max_pool_plane(p, x, y); });
}

void avg_pool2d_kernel(const KernelContext& c) {
  pool2d(c, dnnl::algorithm::pooling_avg_include_padding,
         [](const Pool& p, const auto* x, auto* y) { avg_pool_plane(p, x, y); });
}

// max_pool2d_indices(x) -> int64 [N, C, oh, ow]: where in its plane (iy * W
// + ix) each window's maximum is, the element max_pool2d takes and its
// gradient goes to (window_argmax: the first maximum in row-major order, a
// NaN before any number), as torch's return_indices gives.
TensorMetas infer_max_pool2d_indices(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("x", in[0].dtype);
  return {{pool_geometry(in[0].shape, attrs).out(), DType::kInt64}};
}

void max_pool2d_indices_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &indices = c.outputs[0];
  const Pool p = pool_geometry(x.shape(), c.attrs);
  if (indices.numel() == 0) return;
  visit_floating(x.dtype(), [&]<class T>() {
    for_each_plane(p, [&](int64_t plane) {
      int64_t* out = indices.data<int64_t>() + plane * p.oh * p.ow;
      for_each_window_argmax(p, x.data<T>() + plane * p.h * p.w,
                             [&](int64_t o, int64_t argmax) { out[o] = argmax; });
    });
  });
}

// max_pool2d_backward(x, grad_y) -> grad_x.
TensorMetas infer_max_pool2d_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_same_float(in);
  Pool p = pool_geometry(in[0].shape, attrs);
  TANDEM_CHECK(in[1].shape == p.out(), "grad_y must have the pooling's output shape ",
               p.out().to_string(), ", got ", in[1].shape.to_string());
  return {{in[0].shape, in[0].dtype}};
}

// max_pool2d_backward of one NaN-free plane for 2x2 windows with stride 2
// (which do not overlap): each window's gradient goes to its first maximum,
// the one window_argmax<false> picks. Written as selects on a gradient still
// to place, so that the pass over the output row vectorizes; branching on
// which value is largest mispredicted on activations.
template <class T>
void max_pool_2x2_backward_plane(const Pool& p, const T* x, const T* gy, T* gx) {
  for (int64_t oy = 0; oy < p.oh; ++oy) {
    const T* __restrict top = x + 2 * oy * p.w;
    const T* __restrict bottom = top + p.w;
    T* __restrict gtop = gx + 2 * oy * p.w;
    T* __restrict gbottom = gtop + p.w;
    const T* __restrict g = gy + oy * p.ow;
    for (int64_t ox = 0; ox < p.ow; ++ox) {
      const T v0 = top[2 * ox], v1 = top[2 * ox + 1], v2 = bottom[2 * ox], v3 = bottom[2 * ox + 1];
      const T upper = v0 > v1 ? v0 : v1, lower = v2 > v3 ? v2 : v3;
      const T largest = upper > lower ? upper : lower;
      T rest = g[ox];  // Goes to the first of the four equal to the largest.
      gtop[2 * ox] = v0 == largest ? rest : T{0};
      rest = v0 == largest ? T{0} : rest;
      gtop[2 * ox + 1] = v1 == largest ? rest : T{0};
      rest = v1 == largest ? T{0} : rest;
      gbottom[2 * ox] = v2 == largest ? rest : T{0};
      rest = v2 == largest ? T{0} : rest;
      gbottom[2 * ox + 1] = rest;
    }
  }
}

void max_pool2d_backward_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &gy = c.inputs[1], &gx = c.outputs[0];
  Pool p = pool_geometry(x.shape(), c.attrs);
  if (gx.numel() == 0) return;
  const bool two_by_two = p.kernel == Pair{2, 2} && p.stride == Pair{2, 2} &&
                          p.padding == Pair{0, 0} && p.dilation == Pair{1, 1};
  visit_floating(x.dtype(), [&]<class T>() {
    for_each_plane(p, [&](int64_t plane) {
      const T* px = x.data<T>() + plane * p.h * p.w;
      const T* pgy = gy.data<T>() + plane * p.oh * p.ow;
      T* pgx = gx.data<T>() + plane * p.h * p.w;
      // Zeroed plane by plane rather than in a pass of its own, so that the
      // plane is still in cache when the windows add to it. (Odd sides leave
      // a row or column no 2x2 window covers.)
      std::fill(pgx, pgx + p.h * p.w, T{0});
      if (two_by_two && !any_nan(px, p.h * p.w)) {
        max_pool_2x2_backward_plane(p, px, pgy, pgx);
        return;
      }
      for_each_window_argmax(p, px, [&](int64_t out, int64_t argmax) { pgx[argmax] += pgy[out]; });
    });
  });
}

// avg_pool2d_backward(grad_y) -> grad_x; attrs + "input_shape".
TensorMetas infer_avg_pool2d_backward(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("grad_y", in[0].dtype);
  Pool p = pool_geometry(shape_attr(attrs, "input_shape"), attrs);
  TANDEM_CHECK(in[0].shape == p.out(), "grad_y must have the pooling's output shape ",
               p.out().to_string(), ", got ", in[0].shape.to_string());
  return {{p.in(), in[0].dtype}};
}

void avg_pool2d_backward_kernel(const KernelContext& c) {
  const Tensor &gy = c.inputs[0], &gx = c.outputs[0];
  Pool p = pool_geometry(gx.shape(), c.attrs);
  visit_floating(gy.dtype(), [&]<class T>() {
    const T divisor = static_cast<T>(p.kernel[0] * p.kernel[1]);
    for_each_plane(p, [&](int64_t plane) {
      const T* pgy = gy.data<T>() + plane * p.oh * p.ow;
      T* pgx = gx.data<T>() + plane * p.h * p.w;
      std::fill(pgx, pgx + p.h * p.w, T{0});  // In cache for the windows, as above.
      for_each_window_in_plane(
          p, [&](int64_t out, const WindowSpan& rows, const WindowSpan& columns) {
            const T share = pgy[out] / divisor;
            for (int64_t iy = rows.begin; iy < rows.end; iy += rows.step) {
              for (int64_t ix = columns.begin; ix < columns.end; ix += columns.step) {
                pgx[iy * p.w + ix] += share;
              }
            }
          });
    });
  });
}

std::vector<Tensor> max_pool2d_gradient(const GradContext& c) {
  return {nested_call1("max_pool2d_backward", {c.inputs[0], c.grad_outputs[0]}, c.attrs)};
}

std::vector<Tensor> avg_pool2d_gradient(const GradContext& c) {
  return {nested_call1("avg_pool2d_backward", {c.grad_outputs[0]},
                       with_shape(c.attrs, "input_shape", c.inputs[0].shape()))};
}

// adaptive_avg_pool2d

struct Adaptive {
  int64_t planes, h, w, oh, ow;
};

// The window bounds of both devices compute (o + 1) * in + out - 1 for each
// output o < out of a plane `in` long, and (i + 1) * out + in - 1 for each
// input i < in; both stay below (out + 1) * (in + 1).
void check_adaptive_windows(const Shape& x, int64_t oh, int64_t ow) {
  const int64_t out[] = {oh, ow};
  for (int axis : {0, 1}) {
    checked_mul(checked_add(out[axis], 1, "an output size"),
                checked_add(x[2 + axis], 1, "an input size"), "the output size ", out[axis],
                " + 1 times the input size + 1 of ", [&] { return x.to_string(); });
  }
}

Adaptive adaptive_geometry(const Shape& x, const Attrs& attrs) {
  check_nchw("x", x);
  Pair size = pair_attr(attrs, "output_size", 1);
  TANDEM_CHECK(x[2] > 0 && x[3] > 0, "input of shape ", x.to_string(),
               " has an empty plane; nothing to average");
  check_adaptive_windows(x, size[0], size[1]);
  return {x[0] * x[1], x[2], x[3], size[0], size[1]};
}

// Calls f(out_index, plane_offset, iy0, iy1, ix0, ix1) per output element.
template <class F>
void for_each_adaptive_window(const Adaptive& a, F f) {
  for (int64_t plane = 0; plane < a.planes; ++plane) {
    for (int64_t oy = 0; oy < a.oh; ++oy) {
      const int64_t iy0 = oy * a.h / a.oh, iy1 = ((oy + 1) * a.h + a.oh - 1) / a.oh;
      for (int64_t ox = 0; ox < a.ow; ++ox) {
        const int64_t ix0 = ox * a.w / a.ow, ix1 = ((ox + 1) * a.w + a.ow - 1) / a.ow;
        f((plane * a.oh + oy) * a.ow + ox, plane * a.h * a.w, iy0, iy1, ix0, ix1);
      }
    }
  }
}

TensorMetas infer_adaptive_avg_pool2d(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("x", in[0].dtype);
  Adaptive a = adaptive_geometry(in[0].shape, attrs);
  return {{Shape{in[0].shape[0], in[0].shape[1], a.oh, a.ow}, in[0].dtype}};
}

void adaptive_avg_pool2d_kernel(const KernelContext& c) {
  const Tensor &x = c.inputs[0], &y = c.outputs[0];
  Adaptive a = adaptive_geometry(x.shape(), c.attrs);
  visit_floating(x.dtype(), [&]<class T>() {
    const T* px = x.data<T>();
    T* py = y.data<T>();
    for_each_adaptive_window(
        a, [&](int64_t out, int64_t plane, int64_t iy0, int64_t iy1, int64_t ix0, int64_t ix1) {
          T sum = 0;
          for (int64_t iy = iy0; iy < iy1; ++iy) {
            for (int64_t ix = ix0; ix < ix1; ++ix) sum += px[plane + iy * a.w + ix];
          }
          py[out] = sum / static_cast<T>((iy1 - iy0) * (ix1 - ix0));
        });
  });
}

// adaptive_avg_pool2d_backward(grad_y) -> grad_x; attrs "input_shape" (the
// output size is grad_y's).
TensorMetas infer_adaptive_avg_pool2d_backward(absl::Span<const TensorMeta> in,
                                               const Attrs& attrs) {
  check_floating("grad_y", in[0].dtype);
  Shape x = shape_attr(attrs, "input_shape");
  check_nchw("grad_y", in[0].shape);
  TANDEM_CHECK(in[0].shape[0] == x[0] && in[0].shape[1] == x[1] && in[0].shape[2] > 0 &&
                   in[0].shape[3] > 0 && x[2] > 0 && x[3] > 0,
               "grad_y of shape ", in[0].shape.to_string(), " does not match input_shape ",
               x.to_string());
  check_adaptive_windows(x, in[0].shape[2], in[0].shape[3]);
  return {{x, in[0].dtype}};
}

void adaptive_avg_pool2d_backward_kernel(const KernelContext& c) {
  const Tensor &gy = c.inputs[0], &gx = c.outputs[0];
  const Shape &x = gx.shape(), &y = gy.shape();
  Adaptive a{x[0] * x[1], x[2], x[3], y[2], y[3]};
  visit_floating(gy.dtype(), [&]<class T>() {
    const T* pgy = gy.data<T>();
    T* pgx = gx.data<T>();
    parallel_for(gx.numel(), kCheapGrain,
                 [&](int64_t begin, int64_t end) { std::fill(pgx + begin, pgx + end, T{0}); });
    for_each_adaptive_window(
        a, [&](int64_t out, int64_t plane, int64_t iy0, int64_t iy1, int64_t ix0, int64_t ix1) {
          const T share = pgy[out] / static_cast<T>((iy1 - iy0) * (ix1 - ix0));
          for (int64_t iy = iy0; iy < iy1; ++iy) {
            for (int64_t ix = ix0; ix < ix1; ++ix) pgx[plane + iy * a.w + ix] += share;
          }
        });
  });
}

std::vector<Tensor> adaptive_avg_pool2d_gradient(const GradContext& c) {
  Attrs attrs;
  attrs.set("input_shape",
            std::vector<int64_t>(c.inputs[0].shape().begin(), c.inputs[0].shape().end()));
  return {nested_call1("adaptive_avg_pool2d_backward", {c.grad_outputs[0]}, attrs)};
}

std::vector<AttrSpec> conv_attrs() {
  return {{"stride", std::vector<int64_t>{1, 1}},
          {"padding", std::vector<int64_t>{0, 0}},
          {"dilation", std::vector<int64_t>{1, 1}},
          {"groups", int64_t{1}}};
}

std::vector<AttrSpec> pool_attrs() {
  return {{"kernel", std::vector<int64_t>{}, /*required=*/true},
          {"stride", std::vector<int64_t>{}},
          {"padding", std::vector<int64_t>{0, 0}}};
}

std::vector<AttrSpec> max_pool_attrs() {
  std::vector<AttrSpec> attrs = pool_attrs();
  attrs.push_back({"dilation", std::vector<int64_t>{1, 1}});
  return attrs;
}

std::vector<AttrSpec> plus(std::vector<AttrSpec> attrs, const char* shape_name) {
  attrs.push_back({shape_name, std::vector<int64_t>{}, /*required=*/true});
  return attrs;
}

}  // namespace

const OpDef& conv2d_op() { return op_def<"conv2d">(); }
const OpDef& conv_transpose2d_op() { return op_def<"conv_transpose2d">(); }
const OpDef& max_pool2d_op() { return op_def<"max_pool2d">(); }
const OpDef& max_pool2d_indices_op() { return op_def<"max_pool2d_indices">(); }
const OpDef& avg_pool2d_op() { return op_def<"avg_pool2d">(); }

// A table, one registry.add per op, each entry its op's whole definition:
// long, but with nothing to split.
void register_conv_pool_ops(Registry& registry) {
  std::vector<AttrSpec> conv2d_attrs = conv_attrs();
  for (AttrSpec& spec : onednn::activation_attrs()) conv2d_attrs.push_back(std::move(spec));
  registry.add({.name = "conv2d",
                .num_inputs = 3,
                .attrs = std::move(conv2d_attrs),
                .infer = infer_conv2d,
                .cpu = conv2d_kernel,
                .gradient = conv2d_gradient,
                .doc = "2-D convolution, then the activation (none by default): x [N, C, H, W], "
                       "weight [O, C / groups, kH, kW], bias [O]",
                .uses_all_cores = true,
                .one_core = conv2d_on_one_core});
  registry.add({.name = "conv2d_backward_data",
                .num_inputs = 2,
                .attrs = plus(conv_attrs(), "input_shape"),
                .infer = infer_conv2d_backward_data,
                .cpu = conv2d_backward_data_kernel,
                .differentiable = false,
                .doc = "gradient of conv2d's x: (grad_y, weight) -> grad_x",
                .uses_all_cores = true});
  registry.add({.name = "conv2d_backward_weight",
                .num_inputs = 2,
                .num_outputs = 2,
                .attrs = plus(conv_attrs(), "weight_shape"),
                .infer = infer_conv2d_backward_weight,
                .cpu = conv2d_backward_weight_kernel,
                .differentiable = false,
                .doc = "gradients of conv2d's weight and bias: (x, grad_y) -> grad_w, grad_b",
                .uses_all_cores = true});
  std::vector<AttrSpec> transpose_attrs = conv_attrs();
  transpose_attrs.push_back({"output_padding", std::vector<int64_t>{0, 0}});
  registry.add({.name = "conv_transpose2d",
                .num_inputs = 3,
                .attrs = std::move(transpose_attrs),
                .infer = infer_conv_transpose2d,
                .cpu = conv_transpose2d_kernel,
                .gradient = conv_transpose2d_gradient,
                .doc = "2-D transposed convolution (conv2d's adjoint, plus the bias): x [N, C, H, "
                       "W], weight [C, O / groups, kH, kW], bias [O]",
                .uses_all_cores = true});
  registry.add({.name = "max_pool2d",
                .attrs = max_pool_attrs(),
                .infer = infer_pool,
                .cpu = max_pool2d_kernel,
                .gradient = max_pool2d_gradient,
                .doc = "max over kernel windows of x [N, C, H, W], their positions dilation apart "
                       "(stride defaults to kernel)",
                .uses_all_cores = true,
                .one_core = pool2d_on_one_core});
  registry.add({.name = "max_pool2d_backward",
                .num_inputs = 2,
                .attrs = max_pool_attrs(),
                .infer = infer_max_pool2d_backward,
                .cpu = max_pool2d_backward_kernel,
                .differentiable = false,
                .doc = "gradient of max_pool2d: (x, grad_y) -> grad_x, to each window's argmax"});
  registry.add({.name = "max_pool2d_indices",
                .attrs = max_pool_attrs(),
                .infer = infer_max_pool2d_indices,
                .cpu = max_pool2d_indices_kernel,
                .differentiable = false,
                .doc = "where in its plane (iy * W + ix) each max_pool2d window's maximum is"});
  registry.add({.name = "avg_pool2d",
                .attrs = pool_attrs(),
                .infer = infer_pool,
                .cpu = avg_pool2d_kernel,
                .gradient = avg_pool2d_gradient,
                .doc = "mean over kernel windows of x [N, C, H, W]; padding counts as zeros",
                .uses_all_cores = true,
                .one_core = pool2d_on_one_core});
  registry.add({.name = "avg_pool2d_backward",
                .attrs = plus(pool_attrs(), "input_shape"),
                .infer = infer_avg_pool2d_backward,
                .cpu = avg_pool2d_backward_kernel,
                .differentiable = false,
                .doc = "gradient of avg_pool2d: grad_y -> grad_x"});
  registry.add({.name = "adaptive_avg_pool2d",
                .attrs = {{"output_size", std::vector<int64_t>{}, /*required=*/true}},
                .infer = infer_adaptive_avg_pool2d,
                .cpu = adaptive_avg_pool2d_kernel,
                .gradient = adaptive_avg_pool2d_gradient,
                .doc = "mean over output_size adaptive windows of x [N, C, H, W]"});
  registry.add({.name = "adaptive_avg_pool2d_backward",
                .attrs = {{"input_shape", std::vector<int64_t>{}, /*required=*/true}},
                .infer = infer_adaptive_avg_pool2d_backward,
                .cpu = adaptive_avg_pool2d_backward_kernel,
                .differentiable = false,
                .doc = "gradient of adaptive_avg_pool2d: grad_y -> grad_x"});
}

}  // namespace tandem::kernels
