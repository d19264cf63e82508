#include "eager/nn/conv.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "eager/composite_ops.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

namespace {

// Checks `o` for the module `type` (Conv1d passes its options as a height
// of 1) and registers its weight of `weight_shape` and its bias (or the
// zeros that stand in for one) on `module`, with torch's initialization.
void make_parameters(Module& module, const char* type, const Conv2dOptions& o,
                     const Shape& weight_shape, Tensor& weight, Tensor& bias, Tensor& zero_bias) {
  TANDEM_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.groups > 0, type,
               " needs positive in_channels, out_channels and groups, got ", o.in_channels, ", ",
               o.out_channels, ", ", o.groups);
  TANDEM_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0, type,
               ": in_channels (", o.in_channels, ") and out_channels (", o.out_channels,
               ") must be multiples of groups (", o.groups, ")");
  TANDEM_CHECK(o.kernel_size.h > 0 && o.kernel_size.w > 0 && o.stride.h > 0 && o.stride.w > 0 &&
                   o.dilation.h > 0 && o.dilation.w > 0 && o.padding.h >= 0 && o.padding.w >= 0,
               type,
               " needs positive kernel_size, stride and dilation and non-negative padding, "
               "got kernel_size=",
               o.kernel_size.to_string(), ", stride=", o.stride.to_string(),
               ", dilation=", o.dilation.to_string(), ", padding=", o.padding.to_string());
  weight = module.register_parameter("weight", Tensor::empty(weight_shape, o.dtype));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  const double bound = 1 / std::sqrt(static_cast<double>(init::calculate_fans(weight).first));
  if (o.bias) {
    bias = module.register_parameter("bias", Tensor::empty({o.out_channels}, o.dtype));
    init::uniform_(bias, -bound, bound);
  } else {
    zero_bias = module.register_constant(zeros({o.out_channels}, o.dtype));
  }
}

// The 2-d options of a 1-d convolution: a height of 1, nothing along it.
Conv2dOptions as_2d(const Conv1dOptions& o) {
  return {.in_channels = o.in_channels,
          .out_channels = o.out_channels,
          .kernel_size = {1, o.kernel_size},
          .stride = {1, o.stride},
          .padding = {0, o.padding},
          .dilation = {1, o.dilation},
          .groups = o.groups,
          .bias = o.bias,
          .dtype = o.dtype};
}

// A transposed convolution's options but output_padding (Conv1dOptions
// of a ConvTranspose1dOptions, Conv2dOptions of a ConvTranspose2dOptions):
// what its weight and bias are checked and made by.
template <class ConvOptions, class TransposedOptions>
ConvOptions without_output_padding(const TransposedOptions& o) {
  return {.in_channels = o.in_channels,
          .out_channels = o.out_channels,
          .kernel_size = o.kernel_size,
          .stride = o.stride,
          .padding = o.padding,
          .dilation = o.dilation,
          .groups = o.groups,
          .bias = o.bias,
          .dtype = o.dtype};
}

std::string size_text(int64_t size) { return std::to_string(size); }
template <class SizeN>
std::string size_text(const SizeN& size) {
  return size.to_string();
}

// Any convolution's extra_repr, as torch's: channels and kernel, then what
// differs from the defaults. `Size` is int64_t, Size2 or Size3.
template <class Options, class Size = decltype(Options::stride)>
std::string conv_repr(const Options& o, const Size& output_padding = Size(0)) {
  std::string out =
      str_cat(o.in_channels, ", ", o.out_channels, ", kernel_size=", size_text(o.kernel_size));
  if (o.stride != Size(1)) out += str_cat(", stride=", size_text(o.stride));
  if (o.padding != Size(0)) out += str_cat(", padding=", size_text(o.padding));
  if (output_padding != Size(0)) out += str_cat(", output_padding=", size_text(output_padding));
  if (o.dilation != Size(1)) out += str_cat(", dilation=", size_text(o.dilation));
  if (o.groups != 1) out += str_cat(", groups=", o.groups);
  if (!o.bias) out += ", bias=false";
  return out;
}

}  // namespace

Conv2d::Conv2d(const Conv2dOptions& options) : options_(options) {
  const Conv2dOptions& o = options;
  make_parameters(*this, "Conv2d", o,
                  Shape{o.out_channels, o.in_channels / o.groups, o.kernel_size.h, o.kernel_size.w},
                  weight_, bias_, zero_bias_);
}

Tensor Conv2d::forward(const Tensor& x) {
  TANDEM_CHECK(x.rank() == 4 && x.shape()[1] == options_.in_channels, "Conv2d(",
               options_.in_channels, " -> ", options_.out_channels, ") expects input of shape [N, ",
               options_.in_channels, ", H, W], got ", x.shape().to_string());
  return conv2d(x, weight_, options_.bias ? bias_ : zero_bias_, options_.stride.dims(),
                options_.padding.dims(), options_.dilation.dims(), options_.groups, call_site());
}

std::string Conv2d::extra_repr() const { return conv_repr(options_); }

Conv1d::Conv1d(const Conv1dOptions& options) : options_(options) {
  const Conv1dOptions& o = options;
  make_parameters(*this, "Conv1d", as_2d(o),
                  Shape{o.out_channels, o.in_channels / o.groups, o.kernel_size}, weight_, bias_,
                  zero_bias_);
}

Tensor Conv1d::forward(const Tensor& x) {
  const Conv1dOptions& o = options_;
  TANDEM_CHECK(x.rank() == 3 && x.shape()[1] == o.in_channels, "Conv1d(", o.in_channels, " -> ",
               o.out_channels, ") expects input of shape [N, ", o.in_channels, ", L], got ",
               x.shape().to_string());
  return conv1d(x, weight_, o.bias ? bias_ : zero_bias_, o.stride, o.padding, o.dilation, o.groups,
                call_site());
}

std::string Conv1d::extra_repr() const { return conv_repr(options_); }

Conv3d::Conv3d(const Conv3dOptions& options) : options_(options) {
  const Conv3dOptions& o = options;
  // Depth here; height and width, channels and groups as Conv2d's.
  TANDEM_CHECK(o.kernel_size.d > 0 && o.stride.d > 0 && o.dilation.d > 0 && o.padding.d >= 0,
               "Conv3d needs positive kernel_size, stride and dilation and non-negative padding, "
               "got kernel_size=",
               o.kernel_size.to_string(), ", stride=", o.stride.to_string(),
               ", dilation=", o.dilation.to_string(), ", padding=", o.padding.to_string());
  make_parameters(*this, "Conv3d",
                  {.in_channels = o.in_channels,
                   .out_channels = o.out_channels,
                   .kernel_size = {o.kernel_size.h, o.kernel_size.w},
                   .stride = {o.stride.h, o.stride.w},
                   .padding = {o.padding.h, o.padding.w},
                   .dilation = {o.dilation.h, o.dilation.w},
                   .groups = o.groups,
                   .bias = o.bias,
                   .dtype = o.dtype},
                  Shape{o.out_channels, o.in_channels / o.groups, o.kernel_size.d, o.kernel_size.h,
                        o.kernel_size.w},
                  weight_, bias_, zero_bias_);
}

Tensor Conv3d::forward(const Tensor& x) {
  const Conv3dOptions& o = options_;
  TANDEM_CHECK(x.rank() == 5 && x.shape()[1] == o.in_channels, "Conv3d(", o.in_channels, " -> ",
               o.out_channels, ") expects input of shape [N, ", o.in_channels, ", D, H, W], got ",
               x.shape().to_string());
  return conv3d(x, weight_, o.bias ? bias_ : zero_bias_, o.stride.dims(), o.padding.dims(),
                o.dilation.dims(), o.groups, call_site());
}

std::string Conv3d::extra_repr() const { return conv_repr(options_); }

ConvTranspose2d::ConvTranspose2d(const ConvTranspose2dOptions& options) : options_(options) {
  const ConvTranspose2dOptions& o = options;
  TANDEM_CHECK(o.output_padding.h >= 0 && o.output_padding.w >= 0,
               "ConvTranspose2d needs non-negative output_padding, got ",
               o.output_padding.to_string());
  make_parameters(*this, "ConvTranspose2d", without_output_padding<Conv2dOptions>(o),
                  Shape{o.in_channels, o.out_channels / o.groups, o.kernel_size.h, o.kernel_size.w},
                  weight_, bias_, zero_bias_);
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  const ConvTranspose2dOptions& o = options_;
  TANDEM_CHECK(x.rank() == 4 && x.shape()[1] == o.in_channels, "ConvTranspose2d(", o.in_channels,
               " -> ", o.out_channels, ") expects input of shape [N, ", o.in_channels,
               ", H, W], got ", x.shape().to_string());
  return conv_transpose2d(x, weight_, o.bias ? bias_ : zero_bias_, o.stride.dims(),
                          o.padding.dims(), o.output_padding.dims(), o.groups, o.dilation.dims(),
                          call_site());
}

std::string ConvTranspose2d::extra_repr() const {
  return conv_repr(options_, options_.output_padding);
}

ConvTranspose1d::ConvTranspose1d(const ConvTranspose1dOptions& options) : options_(options) {
  const ConvTranspose1dOptions& o = options;
  TANDEM_CHECK(o.output_padding >= 0, "ConvTranspose1d needs non-negative output_padding, got ",
               o.output_padding);
  make_parameters(*this, "ConvTranspose1d", as_2d(without_output_padding<Conv1dOptions>(o)),
                  Shape{o.in_channels, o.out_channels / o.groups, o.kernel_size}, weight_, bias_,
                  zero_bias_);
}

Tensor ConvTranspose1d::forward(const Tensor& x) {
  const ConvTranspose1dOptions& o = options_;
  TANDEM_CHECK(x.rank() == 3 && x.shape()[1] == o.in_channels, "ConvTranspose1d(", o.in_channels,
               " -> ", o.out_channels, ") expects input of shape [N, ", o.in_channels, ", L], got ",
               x.shape().to_string());
  return conv_transpose1d(x, weight_, o.bias ? bias_ : zero_bias_, o.stride, o.padding,
                          o.output_padding, o.groups, o.dilation, call_site());
}

std::string ConvTranspose1d::extra_repr() const {
  return conv_repr(options_, options_.output_padding);
}

}  // namespace tandem::nn
