// Parameter initializers, as in torch::nn::init.
//
//   auto fc = std::make_shared<nn::Linear>(256, 10);
//   nn::init::xavier_uniform_(fc->weight());
//   nn::init::zeros_(fc->bias());
//
// Each one computes a new value with the eager ops (rand, randn, full) and
// rebinds the tensor to it with Tensor::assign_, under a NoGradGuard: every
// handle on the tensor (the module's member, parameters(), an optimizer's
// list) sees the new value, and autograd records nothing. Random ones draw
// from the global generator, so tandem::manual_seed(s) before building a model
// makes its initial weights reproducible (on every device: the values are
// made on the tensor's own device, the same for the same seed). Each returns
// its argument.
//
// Fans, as in PyTorch, for a weight of shape [out, in, k1, k2, ...]:
//   fan_in = in * k1 * k2 * ...,  fan_out = out * k1 * k2 * ...
// (a Linear weight is [out, in]; a Conv2d weight is [out, in/groups, kh, kw]).
#pragma once

#include <utility>

#include "core/tensor.h"

namespace tandem::nn::init {

enum class FanMode { kFanIn, kFanOut };
enum class Nonlinearity { kLinear, kSigmoid, kTanh, kReLU, kLeakyReLU };

// The recommended gain for a nonlinearity (torch.nn.init.calculate_gain):
// 1 for linear and sigmoid, 5/3 for tanh, sqrt(2) for ReLU, and
// sqrt(2 / (1 + param^2)) for leaky ReLU with negative slope `param`.
double calculate_gain(Nonlinearity nonlinearity, double param = 0.01);

// (fan_in, fan_out) of a tensor of rank >= 2; throws tandem::Error otherwise.
std::pair<int64_t, int64_t> calculate_fans(const Tensor& tensor);

// Values uniform in [low, high).
Tensor uniform_(const Tensor& tensor, double low = 0, double high = 1);
// Values normal with the given mean and standard deviation.
Tensor normal_(const Tensor& tensor, double mean = 0, double std = 1);
// Every element `value`.
Tensor constant_(const Tensor& tensor, double value);
Tensor zeros_(const Tensor& tensor);
Tensor ones_(const Tensor& tensor);

// He et al. (2015): uniform in [-b, b], b = gain * sqrt(3 / fan), with gain =
// calculate_gain(nonlinearity, a) and fan chosen by `mode`. `a` is the
// negative slope for kLeakyReLU. Linear and Conv2d use a = sqrt(5), which
// makes b = 1 / sqrt(fan_in), as PyTorch does.
Tensor kaiming_uniform_(const Tensor& tensor, double a = 0, FanMode mode = FanMode::kFanIn,
                        Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU);
// He et al. (2015): normal with std = gain / sqrt(fan).
Tensor kaiming_normal_(const Tensor& tensor, double a = 0, FanMode mode = FanMode::kFanIn,
                       Nonlinearity nonlinearity = Nonlinearity::kLeakyReLU);
// Glorot & Bengio (2010): uniform in [-b, b], b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor xavier_uniform_(const Tensor& tensor, double gain = 1);
// Glorot & Bengio (2010): normal with std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor xavier_normal_(const Tensor& tensor, double gain = 1);

}  // namespace tandem::nn::init
