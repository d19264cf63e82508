#include "eager/nn/norm.h"

#include <algorithm>

#include "absl/strings/str_join.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::nn {

BatchNorm::BatchNorm(const BatchNormOptions& options, std::vector<int> ranks)
    : options_(options), ranks_(std::move(ranks)) {
  const int64_t c = options.num_features;
  TANDEM_CHECK(c > 0, "BatchNorm needs a positive num_features, got ", c);
  TANDEM_CHECK(options.eps > 0, "BatchNorm needs a positive eps, got ", options.eps);
  TANDEM_CHECK(options.momentum >= 0 && options.momentum <= 1,
               "BatchNorm needs momentum in [0, 1], got ", options.momentum);
  if (options.affine) {
    weight_ = register_parameter("weight", ones({c}, options.dtype));
    bias_ = register_parameter("bias", zeros({c}, options.dtype));
  } else {
    weight_ = register_constant(ones({c}, options.dtype));
    bias_ = register_constant(zeros({c}, options.dtype));
  }
  running_mean_ = register_buffer("running_mean", zeros({c}, options.dtype));
  running_var_ = register_buffer("running_var", ones({c}, options.dtype));
}

Tensor BatchNorm::forward(const Tensor& x) {
  TANDEM_CHECK(std::find(ranks_.begin(), ranks_.end(), x.rank()) != ranks_.end() &&
                   x.shape()[1] == options_.num_features,
               type_name(), "(", options_.num_features, ") expects input of rank ",
               absl::StrJoin(ranks_, " or "), " with ", options_.num_features,
               " channels on axis 1, got ", x.shape().to_string());
  const bool training = is_training();
  const std::source_location where = call_site();
  std::vector<Tensor> out =
      batch_norm(x, weight_, bias_, running_mean_, running_var_, training, options_.eps, where);
  if (training) {
    // See Note [BatchNorm's running statistics].
    NoGradGuard no_grad;
    const int64_t n = x.numel() / options_.num_features;
    const double m = options_.momentum;
    // n / (n - 1) from an op holding n, not a scalar computed here: a trace
    // then follows n when the batch is free (Note [One trace for every size]
    // in eager/hybridize.cc). batch_norm refuses n = 1 in training.
    const Tensor count = full({}, static_cast<double>(n), x.dtype(), x.device(), where);
    const Tensor unbiased = mul(out[2], div(count, sub(count, 1.0, where), where), where);
    running_mean_.assign_(add(mul(running_mean_, 1 - m, where), mul(out[1], m, where), where),
                          where);
    running_var_.assign_(add(mul(running_var_, 1 - m, where), mul(unbiased, m, where), where),
                         where);
  }
  return out[0];
}

std::string BatchNorm::extra_repr() const {
  return str_cat(options_.num_features, ", eps=", options_.eps, ", momentum=", options_.momentum,
                 options_.affine ? "" : ", affine=false");
}

LayerNorm::LayerNorm(const LayerNormOptions& options) : options_(options) {
  const auto& shape = options.normalized_shape;
  TANDEM_CHECK(
      !shape.empty() && std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d > 0; }),
      "LayerNorm needs a non-empty normalized_shape of positive sizes, got [",
      absl::StrJoin(shape, ", "), "]");
  TANDEM_CHECK(options.eps > 0, "LayerNorm needs a positive eps, got ", options.eps);
  if (options.elementwise_affine) {
    weight_ = register_parameter("weight", ones(shape, options.dtype));
    bias_ = register_parameter("bias", zeros(shape, options.dtype));
  } else {
    weight_ = register_constant(ones(shape, options.dtype));
    bias_ = register_constant(zeros(shape, options.dtype));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  const auto& shape = options_.normalized_shape;
  const int k = static_cast<int>(shape.size());
  TANDEM_CHECK(x.rank() >= k && std::equal(shape.begin(), shape.end(), x.shape().end() - k),
               "LayerNorm expects input whose trailing dims are [", absl::StrJoin(shape, ", "),
               "], got ", x.shape().to_string());
  return layer_norm(x, weight_, bias_, k, options_.eps, call_site());
}

std::string LayerNorm::extra_repr() const {
  return str_cat("[", absl::StrJoin(options_.normalized_shape, ", "), "], eps=", options_.eps,
                 options_.elementwise_affine ? "" : ", elementwise_affine=false");
}

}  // namespace tandem::nn
