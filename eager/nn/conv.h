// nn::Conv2d, nn::Conv1d, nn::Conv3d, nn::ConvTranspose2d and
// nn::ConvTranspose1d: convolutions over [N, C, H, W], [N, C, L] and [N, C,
// D, H, W] input, and the transposed convolutions, as torch::nn's modules of
// those names.
//
//   auto conv = std::make_shared<nn::Conv2d>(3, 16, /*kernel=*/3, /*stride=*/1, /*padding=*/1);
//   Tensor y = conv->forward(x);                 // [N, 3, 32, 32] -> [N, 16, 32, 32]
//
//   // Or by options, naming only what differs from the defaults:
//   nn::Conv2d depthwise({.in_channels = 32, .out_channels = 32, .kernel_size = 3,
//                         .padding = 1, .groups = 32});
//
// Parameters: "weight" [out, in / groups, kh, kw], initialized
// kaiming_uniform_(a = sqrt(5)), i.e. uniform in +-1/sqrt(fan_in) with
// fan_in = in / groups * kh * kw; and, when `bias`, "bias" [out], uniform in
// +-1/sqrt(fan_in).
// Output size per spatial axis: (size + 2 padding - dilation (k - 1) - 1) / stride + 1.
//
// Conv1d is Conv2d over a height of 1 (conv1d in eager/composite_ops.h):
// its weight keeps torch's shape [out, in / groups, k] (so state dicts carry
// over), and forward views the input as [N, C, 1, L] and the weight as
// [out, in / groups, 1, k] for the one convolution op, so it trains,
// hybridizes and exports as Conv2d does. ConvTranspose1d is ConvTranspose2d
// over a height of 1 the same way.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "eager/nn/module.h"
#include "eager/nn/size2.h"
#include "eager/nn/size3.h"

namespace tandem::nn {

struct Conv2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  Size2 kernel_size;
  Size2 stride = 1;
  Size2 padding = 0;  // Zeros on each side.
  Size2 dilation = 1;
  // in_channels and out_channels must both be multiples of groups.
  int64_t groups = 1;
  bool bias = true;
  DType dtype = DType::kFloat32;  // Of the parameters.
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options);
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
         Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1, bool bias = true)
      : Conv2d(Conv2dOptions{in_channels, out_channels, kernel_size, stride, padding, dilation,
                             groups, bias}) {}

  // x: [N, in_channels, H, W] -> [N, out_channels, H', W'].
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;

  const Conv2dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  // Undefined when options().bias is false.
  const Tensor& bias() const { return bias_; }

 private:
  Conv2dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;  // Stands in for bias_ when there is none; not a parameter.
};

struct Conv1dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;  // Zeros on each side.
  int64_t dilation = 1;
  int64_t groups = 1;  // Divides in_channels and out_channels.
  bool bias = true;
  DType dtype = DType::kFloat32;
};

class Conv1d : public Module {
 public:
  explicit Conv1d(const Conv1dOptions& options);
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool bias = true)
      : Conv1d(Conv1dOptions{in_channels, out_channels, kernel_size, stride, padding, dilation,
                             groups, bias}) {}

  // x: [N, in_channels, L] -> [N, out_channels, L'].
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;

  const Conv1dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // Undefined without bias.

 private:
  Conv1dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;
};

struct Conv3dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  Size3 kernel_size;
  Size3 stride = 1;
  Size3 padding = 0;  // Zeros on each side.
  Size3 dilation = 1;
  int64_t groups = 1;  // Divides in_channels and out_channels.
  bool bias = true;
  DType dtype = DType::kFloat32;
};

// "weight" [out, in / groups, kd, kh, kw], "bias" [out], initialized as
// Conv2d's (fan_in = in / groups * kd * kh * kw).
class Conv3d : public Module {
 public:
  explicit Conv3d(const Conv3dOptions& options);
  Conv3d(int64_t in_channels, int64_t out_channels, Size3 kernel_size, Size3 stride = 1,
         Size3 padding = 0, Size3 dilation = 1, int64_t groups = 1, bool bias = true)
      : Conv3d(Conv3dOptions{in_channels, out_channels, kernel_size, stride, padding, dilation,
                             groups, bias}) {}

  // x: [N, in_channels, D, H, W] -> [N, out_channels, D', H', W'].
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv3d"; }
  std::string extra_repr() const override;

  const Conv3dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // Undefined without bias.

 private:
  Conv3dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;
};

struct ConvTranspose2dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  Size2 kernel_size;
  Size2 stride = 1;
  Size2 padding = 0;
  // Added to one side of the output: picks among the sizes a strided
  // convolution maps back to the input's (below the stride; torch also takes
  // it below the dilation, which Tandem refuses).
  Size2 output_padding = 0;
  int64_t groups = 1;
  bool bias = true;
  Size2 dilation = 1;
  DType dtype = DType::kFloat32;
};

// The transposed convolution, the adjoint of Conv2d (a learned upsampling):
// "weight" is [in, out / groups, kh, kw] (torch's layout), initialized as
// torch does (fan_in = out / groups * kh * kw), and "bias" [out].
// Output size per spatial axis: (size - 1) stride - 2 padding +
// dilation (k - 1) + output_padding + 1.
class ConvTranspose2d : public Module {
 public:
  explicit ConvTranspose2d(const ConvTranspose2dOptions& options);
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
                  Size2 padding = 0, Size2 output_padding = 0, int64_t groups = 1, bool bias = true,
                  Size2 dilation = 1)
      : ConvTranspose2d(ConvTranspose2dOptions{in_channels, out_channels, kernel_size, stride,
                                               padding, output_padding, groups, bias, dilation}) {}

  // x: [N, in_channels, H, W] -> [N, out_channels, H', W'].
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose2d"; }
  std::string extra_repr() const override;

  const ConvTranspose2dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // Undefined without bias.

 private:
  ConvTranspose2dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;
};

struct ConvTranspose1dOptions {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel_size = 0;
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t output_padding = 0;  // As ConvTranspose2dOptions's.
  int64_t groups = 1;
  bool bias = true;
  int64_t dilation = 1;
  DType dtype = DType::kFloat32;
};

// "weight" [in, out / groups, k], "bias" [out]. Output length: (L - 1)
// stride - 2 padding + dilation (k - 1) + output_padding + 1.
class ConvTranspose1d : public Module {
 public:
  explicit ConvTranspose1d(const ConvTranspose1dOptions& options);
  ConvTranspose1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size,
                  int64_t stride = 1, int64_t padding = 0, int64_t output_padding = 0,
                  int64_t groups = 1, bool bias = true, int64_t dilation = 1)
      : ConvTranspose1d(ConvTranspose1dOptions{in_channels, out_channels, kernel_size, stride,
                                               padding, output_padding, groups, bias, dilation}) {}

  // x: [N, in_channels, L] -> [N, out_channels, L'].
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ConvTranspose1d"; }
  std::string extra_repr() const override;

  const ConvTranspose1dOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // Undefined without bias.

 private:
  ConvTranspose1dOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;
};

}  // namespace tandem::nn
