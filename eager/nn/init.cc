#include "eager/nn/init.h"

#include <cmath>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::nn::init {
namespace {

Dims dims_of(const Tensor& t) { return Dims(t.shape().begin(), t.shape().end()); }

Tensor set(const Tensor& tensor, const Tensor& value) {
  tensor.assign_(value);
  return tensor;
}

int64_t fan(const Tensor& tensor, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fans(tensor);
  return mode == FanMode::kFanIn ? fan_in : fan_out;
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, double param) {
  switch (nonlinearity) {
    case Nonlinearity::kLinear:
    case Nonlinearity::kSigmoid:
      return 1;
    case Nonlinearity::kTanh:
      return 5.0 / 3;
    case Nonlinearity::kReLU:
      return std::sqrt(2.0);
    case Nonlinearity::kLeakyReLU:
      return std::sqrt(2.0 / (1 + param * param));
  }
  TANDEM_INTERNAL_ASSERT(false, "unknown nonlinearity");
}

std::pair<int64_t, int64_t> calculate_fans(const Tensor& tensor) {
  TANDEM_CHECK(tensor.rank() >= 2, "fans need a tensor of rank >= 2, got shape ",
               tensor.shape().to_string());
  int64_t receptive = 1;
  for (int i = 2; i < tensor.rank(); ++i) receptive *= tensor.shape()[i];
  return {tensor.shape()[1] * receptive, tensor.shape()[0] * receptive};
}

Tensor uniform_(const Tensor& tensor, double low, double high) {
  NoGradGuard no_grad;
  return set(tensor,
             add(mul(rand(dims_of(tensor), tensor.dtype(), tensor.device()), high - low), low));
}

Tensor normal_(const Tensor& tensor, double mean, double std) {
  NoGradGuard no_grad;
  return set(tensor, add(mul(randn(dims_of(tensor), tensor.dtype(), tensor.device()), std), mean));
}

Tensor constant_(const Tensor& tensor, double value) {
  NoGradGuard no_grad;
  return set(tensor, full(dims_of(tensor), value, tensor.dtype(), tensor.device()));
}

Tensor zeros_(const Tensor& tensor) { return constant_(tensor, 0); }
Tensor ones_(const Tensor& tensor) { return constant_(tensor, 1); }

Tensor kaiming_uniform_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  const double bound =
      calculate_gain(nonlinearity, a) * std::sqrt(3.0 / static_cast<double>(fan(tensor, mode)));
  return uniform_(tensor, -bound, bound);
}

Tensor kaiming_normal_(const Tensor& tensor, double a, FanMode mode, Nonlinearity nonlinearity) {
  const double std =
      calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan(tensor, mode)));
  return normal_(tensor, 0, std);
}

Tensor xavier_uniform_(const Tensor& tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fans(tensor);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(tensor, -bound, bound);
}

Tensor xavier_normal_(const Tensor& tensor, double gain) {
  auto [fan_in, fan_out] = calculate_fans(tensor);
  return normal_(tensor, 0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

}  // namespace tandem::nn::init
