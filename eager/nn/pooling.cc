#include "eager/nn/pooling.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

Pool2d::Pool2d(const Pool2dOptions& options) : options_(options) {
  const Size2 k = options.kernel_size, s = stride(), p = options.padding;
  TANDEM_CHECK(k.h > 0 && k.w > 0 && s.h > 0 && s.w > 0 && p.h >= 0 && p.w >= 0,
               "pooling needs positive kernel_size and stride and non-negative padding, got "
               "kernel_size=",
               k.to_string(), ", stride=", s.to_string(), ", padding=", p.to_string());
}

void Pool2d::check_input(const Tensor& x) const {
  TANDEM_CHECK(x.rank() == 4, type_name(), " expects input of shape [N, C, H, W], got ",
               x.shape().to_string());
}

std::string Pool2d::extra_repr() const {
  std::string out =
      str_cat("kernel_size=", options_.kernel_size.to_string(), ", stride=", stride().to_string());
  if (options_.padding != Size2(0)) out += str_cat(", padding=", options_.padding.to_string());
  return out;
}

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation)
    : Pool2d(Pool2dOptions{kernel_size, stride, padding}), dilation_(dilation) {
  TANDEM_CHECK(dilation.h > 0 && dilation.w > 0, "MaxPool2d needs a positive dilation, got ",
               dilation.to_string());
}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_input(x);
  return max_pool2d(x, options().kernel_size.dims(), stride().dims(), options().padding.dims(),
                    dilation_.dims(), call_site());
}

std::string MaxPool2d::extra_repr() const {
  std::string out = Pool2d::extra_repr();
  if (dilation_ != Size2(1)) out += str_cat(", dilation=", dilation_.to_string());
  return out;
}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_input(x);
  return avg_pool2d(x, options().kernel_size.dims(), stride().dims(), options().padding.dims(),
                    call_site());
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size_(output_size) {
  TANDEM_CHECK(output_size.h > 0 && output_size.w > 0,
               "AdaptiveAvgPool2d needs a positive output size, got ", output_size.to_string());
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  TANDEM_CHECK(x.rank() == 4, "AdaptiveAvgPool2d expects input of shape [N, C, H, W], got ",
               x.shape().to_string());
  return adaptive_avg_pool2d(x, output_size_.dims(), call_site());
}

std::string AdaptiveAvgPool2d::extra_repr() const {
  return str_cat("output_size=", output_size_.to_string());
}

}  // namespace tandem::nn
