#include "eager/nn/activation.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x, call_site()); }

Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope_, call_site()); }
std::string LeakyReLU::extra_repr() const { return str_cat("negative_slope=", negative_slope_); }

Tensor GELU::forward(const Tensor& x) { return gelu(x, call_site()); }

Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x, call_site()); }

Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim_, call_site()); }
std::string Softmax::extra_repr() const { return str_cat("dim=", dim_); }

Tensor Tanh::forward(const Tensor& x) { return tanh(x, call_site()); }

}  // namespace tandem::nn
