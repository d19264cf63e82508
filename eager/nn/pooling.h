// Pooling layers over [N, C, H, W], as in torch::nn. No parameters.
//
//   nn::MaxPool2d pool(2);                  // 2 x 2 windows, stride 2
//   pool.forward(x);                        // [N, C, 28, 28] -> [N, C, 14, 14]
//   nn::AdaptiveAvgPool2d gap(1);           // any [N, C, H, W] -> [N, C, 1, 1]
//
// Output size per spatial axis: (size + 2 padding - dilation (kernel - 1) -
// 1) / stride + 1, rounded down (dilation: MaxPool2d's, else 1). The stride
// defaults to the kernel size. AvgPool2d counts the
// padding zeros in its averages, as PyTorch's default does.
#pragma once

#include <optional>

#include "eager/nn/module.h"
#include "eager/nn/size2.h"

namespace tandem::nn {

struct Pool2dOptions {
  Size2 kernel_size;
  std::optional<Size2> stride;  // Unset: the kernel size.
  Size2 padding = 0;
};

// What MaxPool2d and AvgPool2d share; use those. A non-square kernel alone
// is written nn::MaxPool2d(nn::Size2(2, 3)): a bare {2, 3} would also read as
// (kernel 2, stride 3) and does not compile.
class Pool2d : public Module {
 public:
  std::string extra_repr() const override;
  const Pool2dOptions& options() const { return options_; }
  Size2 stride() const { return options_.stride.value_or(options_.kernel_size); }

 protected:
  explicit Pool2d(const Pool2dOptions& options);
  void check_input(const Tensor& x) const;

 private:
  Pool2dOptions options_;
};

// The maximum of each window, whose positions are `dilation` apart.
class MaxPool2d : public Pool2d {
 public:
  explicit MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0, Size2 dilation = 1);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Size2 dilation() const { return dilation_; }

 private:
  Size2 dilation_;
};

// The mean of each window.
class AvgPool2d : public Pool2d {
 public:
  explicit AvgPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt,
                     Size2 padding = 0)
      : Pool2d(Pool2dOptions{kernel_size, stride, padding}) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AvgPool2d"; }
};

// Averages into a fixed output size, whatever the input size: window i of n
// over an axis of size s spans [floor(i s / n), ceil((i + 1) s / n)).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Size2 output_size() const { return output_size_; }

 private:
  Size2 output_size_;
};

}  // namespace tandem::nn
