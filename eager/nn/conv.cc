#include "eager/nn/conv.h"

#include <cmath>

#include "core/error.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

Conv2d::Conv2d(const Conv2dOptions& options) : options_(options) {
  const Conv2dOptions& o = options;
  TANDEM_CHECK(o.in_channels > 0 && o.out_channels > 0 && o.groups > 0,
               "Conv2d needs positive in_channels, out_channels and groups, got ", o.in_channels,
               ", ", o.out_channels, ", ", o.groups);
  TANDEM_CHECK(o.in_channels % o.groups == 0 && o.out_channels % o.groups == 0,
               "Conv2d: in_channels (", o.in_channels, ") and out_channels (", o.out_channels,
               ") must be multiples of groups (", o.groups, ")");
  TANDEM_CHECK(o.kernel_size.h > 0 && o.kernel_size.w > 0 && o.stride.h > 0 && o.stride.w > 0 &&
                   o.dilation.h > 0 && o.dilation.w > 0 && o.padding.h >= 0 && o.padding.w >= 0,
               "Conv2d needs positive kernel_size, stride and dilation and non-negative padding, "
               "got kernel_size=",
               o.kernel_size.to_string(), ", stride=", o.stride.to_string(),
               ", dilation=", o.dilation.to_string(), ", padding=", o.padding.to_string());
  weight_ = register_parameter("weight", Tensor::empty({o.out_channels, o.in_channels / o.groups,
                                                        o.kernel_size.h, o.kernel_size.w},
                                                       o.dtype));
  init::kaiming_uniform_(weight_, std::sqrt(5.0));
  const double bound = 1 / std::sqrt(static_cast<double>(init::calculate_fans(weight_).first));
  if (o.bias) {
    bias_ = register_parameter("bias", Tensor::empty({o.out_channels}, o.dtype));
    init::uniform_(bias_, -bound, bound);
  } else {
    zero_bias_ = register_constant(zeros({o.out_channels}, o.dtype));
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  TANDEM_CHECK(x.rank() == 4 && x.shape()[1] == options_.in_channels, "Conv2d(",
               options_.in_channels, " -> ", options_.out_channels, ") expects input of shape [N, ",
               options_.in_channels, ", H, W], got ", x.shape().to_string());
  return conv2d(x, weight_, options_.bias ? bias_ : zero_bias_, options_.stride.dims(),
                options_.padding.dims(), options_.dilation.dims(), options_.groups, call_site());
}

std::string Conv2d::extra_repr() const {
  const Conv2dOptions& o = options_;
  std::string out =
      str_cat(o.in_channels, ", ", o.out_channels, ", kernel_size=", o.kernel_size.to_string());
  if (o.stride != Size2(1)) out += str_cat(", stride=", o.stride.to_string());
  if (o.padding != Size2(0)) out += str_cat(", padding=", o.padding.to_string());
  if (o.dilation != Size2(1)) out += str_cat(", dilation=", o.dilation.to_string());
  if (o.groups != 1) out += str_cat(", groups=", o.groups);
  if (!o.bias) out += ", bias=false";
  return out;
}

}  // namespace tandem::nn
