#include "eager/optim/adam.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "eager/optim/update_programs.h"

namespace tandem::optim {
namespace {

// a - b, for a host constant a; the same rounding as the host's a - b.
Tensor rsub(double a, const Tensor& b) { return add(neg(b), a); }

// x in `dtype` (no op when it already is).
Tensor to_dtype(const Tensor& x, DType dtype) { return x.dtype() == dtype ? x : cast(x, dtype); }

// Note [Adam in three passes]
// Written op by op, an Adam update is 13 elementwise passes over each
// parameter, each allocating a result: on the MLP benchmark those passes
// were a quarter of the training step. The same arithmetic as three
// fused_elementwise programs (Note [Fused elementwise programs]) reads each
// tensor once per program: the two moments, then the parameter. The
// instructions are the ops the unfused update calls, in the same order and
// on the same float constants, so the results are the same bits.
//
//   exp_avg'    = exp_avg * beta1 + g * (1 - beta1)
//   exp_avg_sq' = exp_avg_sq * beta2 + (g * g) * (1 - beta2)
//   param'      = param - exp_avg' / (sqrt(v) / bias_correction2_sqrt + eps) * step_size
constexpr const char* kParamUpdate =
    "r0=sqrt(i2);r1=div(r0,i3);r2=add(r1,i4);r3=div(i1,r2);r4=mul(r3,i5);r5=sub(i0,r4)";

}  // namespace

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::move(params), options, /*decoupled_weight_decay=*/false) {}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay)
    : Optimizer(std::move(params), options.lr),
      options_(options),
      decoupled_(decoupled_weight_decay),
      steps_(params_.size()) {
  const char* name = decoupled_ ? "AdamW" : "Adam";
  const auto [beta1, beta2] = options.betas;
  TANDEM_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, name,
               ": betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
  TANDEM_CHECK(options.eps >= 0, name, ": eps must be >= 0, got ", options.eps);
  TANDEM_CHECK(options.weight_decay >= 0, name, ": weight_decay must be >= 0, got ",
               options.weight_decay);
  // See Note [Why optimizer state is tensors updated in place].
  state_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Dims dims(p.shape().begin(), p.shape().end());
    state_[i].exp_avg = zeros(dims, p.dtype(), p.device());
    state_[i].exp_avg_sq = zeros(dims, p.dtype(), p.device());
    if (options.amsgrad) state_[i].max_exp_avg_sq = zeros(dims, p.dtype(), p.device());
  }
}

int64_t Adam::step_count(size_t i) const {
  return static_cast<int64_t>(steps_.of(i).item<double>());
}

// The tensors one step shares between parameters: the bias corrections per
// step-count group and dtype, AdamW's decay and the update's constants per
// dtype, made by ops on the first parameter that needs each.
struct Adam::StepScalars {
  struct Corrections {
    Tensor bias_correction2_sqrt, step_size;  // sqrt(1 - beta2^t), lr / (1 - beta1^t)
  };
  struct Constants {
    Tensor beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  };
  std::map<std::pair<size_t, DType>, Corrections> corrections;
  std::map<DType, Tensor> decay;  // AdamW: 1 - lr * weight_decay.
  std::map<DType, Constants> constants;
};

void Adam::step() {
  NoGradGuard no_grad;
  std::vector<bool> updated(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) updated[i] = params_[i].grad().defined();
  if (std::find(updated.begin(), updated.end(), true) == updated.end()) return;
  steps_.advance(updated);
  StepScalars scalars;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (updated[i]) update(i, scalars);
  }
}

void Adam::update(size_t i, StepScalars& scalars) {
  const auto [beta1, beta2] = options_.betas;
  const double wd = options_.weight_decay;
  const Tensor& lr = lr_tensor(DType::kFloat64);
  const Tensor& p = params_[i];
  const DType dtype = p.dtype();
  // In float64 as the host computed them before, then in the parameter's dtype.
  auto [it, is_new] = scalars.corrections.try_emplace({steps_.group(i), dtype});
  if (is_new) {
    const Tensor& t = steps_.of(i);
    Tensor bias_correction1 = rsub(1, pow(full({}, beta1, DType::kFloat64), t));
    Tensor bias_correction2 = rsub(1, pow(full({}, beta2, DType::kFloat64), t));
    it->second = {to_dtype(sqrt(bias_correction2), dtype),
                  to_dtype(div(lr, bias_correction1), dtype)};
  }
  const StepScalars::Corrections& k = it->second;
  State& s = state_[i];
  follow_param_device(s.exp_avg, i);
  follow_param_device(s.exp_avg_sq, i);
  follow_param_device(s.max_exp_avg_sq, i);
  Tensor g = p.grad();
  Tensor param = p;
  if (wd != 0) {
    if (decoupled_) {
      auto [d, is_new_decay] = scalars.decay.try_emplace(dtype);
      if (is_new_decay) d->second = to_dtype(rsub(1, mul(lr, wd)), dtype);
      param = mul(param, d->second);
    } else {
      g = add(g, mul(param, wd));
    }
  }
  // See Note [Adam in three passes].
  auto [c, is_new_constants] = scalars.constants.try_emplace(dtype);
  if (is_new_constants) {
    c->second = {full({}, beta1, dtype), full({}, 1 - beta1, dtype), full({}, beta2, dtype),
                 full({}, 1 - beta2, dtype), full({}, options_.eps, dtype)};
  }
  const StepScalars::Constants& h = c->second;
  s.exp_avg.assign_(fused_update(programs::kAverage, {s.exp_avg, h.beta1, g, h.one_minus_beta1}));
  s.exp_avg_sq.assign_(
      fused_update(programs::kSquareAverage, {s.exp_avg_sq, h.beta2, g, h.one_minus_beta2}));
  Tensor v = s.exp_avg_sq;
  if (options_.amsgrad) {
    s.max_exp_avg_sq.assign_(maximum(s.max_exp_avg_sq, s.exp_avg_sq));
    v = s.max_exp_avg_sq;
  }
  p.assign_(fused_update(kParamUpdate,
                         {param, s.exp_avg, v, k.bias_correction2_sqrt, h.eps, k.step_size}));
}

}  // namespace tandem::optim
