#include "eager/nn/activation.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope_); }
std::string LeakyReLU::extra_repr() const { return str_cat("negative_slope=", negative_slope_); }

Tensor GELU::forward(const Tensor& x) { return gelu(x); }

Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }

Tensor Tanh::forward(const Tensor& x) { return tanh(x); }

}  // namespace tandem::nn
