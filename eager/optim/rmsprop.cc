#include "eager/optim/rmsprop.h"

#include <map>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "eager/optim/update_programs.h"

namespace tandem::optim {
namespace {

// sqrt(i0 - i1 * i1) + i2: the centered root mean square plus eps.
constexpr const char* kCenteredAverage = "r0=mul(i1,i1);r1=sub(i0,r0);r2=sqrt(r1);r3=add(r2,i2)";
// i0 * i1 + i2 / i3: the momentum buffer's update.
constexpr const char* kMomentum = "r0=mul(i0,i1);r1=div(i2,i3);r2=add(r0,r1)";

}  // namespace

RMSprop::RMSprop(std::vector<Tensor> params, const RMSpropOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  const RMSpropOptions& o = options;
  TANDEM_CHECK(o.alpha >= 0 && o.alpha < 1, "RMSprop: alpha must be in [0, 1), got ", o.alpha);
  TANDEM_CHECK(o.eps >= 0 && o.weight_decay >= 0 && o.momentum >= 0,
               "RMSprop: eps, weight_decay and momentum must be >= 0, got ", o.eps, ", ",
               o.weight_decay, " and ", o.momentum);
  // See Note [Why optimizer state is tensors updated in place].
  state_.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    const Dims dims(p.shape().begin(), p.shape().end());
    state_[i].square_avg = zeros(dims, p.dtype(), p.device());
    if (o.centered) state_[i].grad_avg = zeros(dims, p.dtype(), p.device());
    if (o.momentum > 0) state_[i].momentum_buffer = zeros(dims, p.dtype(), p.device());
  }
}

void RMSprop::step() {
  NoGradGuard no_grad;
  const RMSpropOptions& o = options_;
  struct Constants {
    Tensor alpha, one_minus_alpha, eps, momentum;
  };
  std::map<DType, Constants> constants;  // Once per dtype.
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    if (!p.grad().defined()) continue;
    const DType dtype = p.dtype();
    auto [c, is_new] = constants.try_emplace(dtype);
    if (is_new) {
      c->second = {full({}, o.alpha, dtype), full({}, 1 - o.alpha, dtype), full({}, o.eps, dtype),
                   full({}, o.momentum, dtype)};
    }
    const Constants& k = c->second;
    State& s = state_[i];
    follow_param_device(s.square_avg, i);
    follow_param_device(s.grad_avg, i);
    follow_param_device(s.momentum_buffer, i);
    Tensor g = p.grad();
    if (o.weight_decay != 0) g = add(g, mul(p, o.weight_decay));
    s.square_avg.assign_(
        fused_update(programs::kSquareAverage, {s.square_avg, k.alpha, g, k.one_minus_alpha}));
    const Tensor& lr = lr_tensor(dtype);
    if (!o.centered && o.momentum == 0) {
      p.assign_(fused_update(programs::kRootMeanSquareStep, {p, g, s.square_avg, k.eps, lr}));
      continue;
    }
    Tensor average;
    if (o.centered) {
      s.grad_avg.assign_(
          fused_update(programs::kAverage, {s.grad_avg, k.alpha, g, k.one_minus_alpha}));
      average = fused_update(kCenteredAverage, {s.square_avg, s.grad_avg, k.eps});
    } else {
      average = add(sqrt(s.square_avg), k.eps);
    }
    if (o.momentum > 0) {
      s.momentum_buffer.assign_(
          fused_update(kMomentum, {s.momentum_buffer, k.momentum, g, average}));
      p.assign_(fused_update(programs::kDescent, {p, s.momentum_buffer, lr}));
    } else {
      p.assign_(fused_update(programs::kDescent, {p, div(g, average), lr}));
    }
  }
}

}  // namespace tandem::optim
