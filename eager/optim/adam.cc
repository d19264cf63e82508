#include "eager/optim/adam.h"

#include <cmath>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::optim {

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::move(params), options, /*decoupled_weight_decay=*/false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params), options.lr),
      options_(options),
      decoupled_(decoupled_weight_decay) {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  const auto [beta1, beta2] = options.betas;
  TANDEM_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, name,
               ": betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
  TANDEM_CHECK(options.eps >= 0, name, ": eps must be >= 0, got ", options.eps);
  TANDEM_CHECK(options.weight_decay >= 0, name, ": weight_decay must be >= 0, got ",
               options.weight_decay);
  state_.resize(params_.size());
}

void Adam::step() {
  NoGradGuard no_grad;
  const auto [beta1, beta2] = options_.betas;
  const double wd = options_.weight_decay;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    State& s = state_[i];
    if (s.step == 0) {
      Dims dims(p.shape().begin(), p.shape().end());
      s.exp_avg = zeros(dims, p.dtype());
      s.exp_avg_sq = zeros(dims, p.dtype());
      if (options_.amsgrad) s.max_exp_avg_sq = zeros(dims, p.dtype());
    }
    ++s.step;
    Tensor param = p;
    if (wd != 0) {
      if (decoupled_) {
        param = mul(param, 1 - lr() * wd);
      } else {
        g = add(g, mul(param, wd));
      }
    }
    s.exp_avg = add(mul(s.exp_avg, beta1), mul(g, 1 - beta1));
    s.exp_avg_sq = add(mul(s.exp_avg_sq, beta2), mul(mul(g, g), 1 - beta2));
    const double t = static_cast<double>(s.step);
    const double bias_correction1 = 1 - std::pow(beta1, t);
    const double bias_correction2_sqrt = std::sqrt(1 - std::pow(beta2, t));
    Tensor v = s.exp_avg_sq;
    if (options_.amsgrad) v = s.max_exp_avg_sq = maximum(s.max_exp_avg_sq, s.exp_avg_sq);
    Tensor denom = add(div(sqrt(v), bias_correction2_sqrt), options_.eps);
    p.assign_(sub(param, mul(div(s.exp_avg, denom), lr() / bias_correction1)));
  }
}

}  // namespace tandem::optim
