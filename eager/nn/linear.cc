#include "eager/nn/linear.h"

#include <cmath>

#include "core/error.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

Linear::Linear(const LinearOptions& options) : options_(options) {
  TANDEM_CHECK(options.in_features > 0 && options.out_features > 0,
               "Linear needs positive in_features and out_features, got ", options.in_features,
               " and ", options.out_features);
  weight_ = register_parameter(
      "weight", Tensor::empty({options.out_features, options.in_features}, options.dtype));
  init::kaiming_uniform_(weight_, std::sqrt(5.0));
  const double bound = 1 / std::sqrt(static_cast<double>(options.in_features));
  if (options.bias) {
    bias_ = register_parameter("bias", Tensor::empty({options.out_features}, options.dtype));
    init::uniform_(bias_, -bound, bound);
  } else {
    zero_bias_ = register_constant(zeros({options.out_features}, options.dtype));
  }
}

Tensor Linear::forward(const Tensor& x) {
  TANDEM_CHECK(x.rank() >= 1 && x.shape().dim(-1) == options_.in_features, "Linear(",
               options_.in_features, " -> ", options_.out_features,
               ") expects input of shape [..., ", options_.in_features, "], got ",
               x.shape().to_string());
  return linear(x, weight_, options_.bias ? bias_ : zero_bias_, call_site());
}

std::string Linear::extra_repr() const {
  return str_cat("in_features=", options_.in_features, ", out_features=", options_.out_features,
                 ", bias=", options_.bias ? "true" : "false");
}

}  // namespace tandem::nn
