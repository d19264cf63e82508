#include "eager/optim/adagrad.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "eager/optim/update_programs.h"

namespace tandem::optim {
namespace {

// i0 + i1 * i1: the sum of squared gradients.
constexpr const char* kAccumulate = "r0=mul(i1,i1);r1=add(i0,r0)";

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, const AdagradOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options), steps_(params_.size()) {
  const AdagradOptions& o = options;
  TANDEM_CHECK(
      o.lr_decay >= 0 && o.weight_decay >= 0 && o.initial_accumulator_value >= 0 && o.eps >= 0,
      "Adagrad: lr_decay, weight_decay, initial_accumulator_value and eps must be >= 0, "
      "got ",
      o.lr_decay, ", ", o.weight_decay, ", ", o.initial_accumulator_value, " and ", o.eps);
  // See Note [Why optimizer state is tensors updated in place].
  for (const Tensor& p : params_) {
    sums_.push_back(full(Dims(p.shape().begin(), p.shape().end()), o.initial_accumulator_value,
                         p.dtype(), p.device()));
  }
}

void Adagrad::step() {
  NoGradGuard no_grad;
  const AdagradOptions& o = options_;
  std::vector<bool> updated(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) updated[i] = params_[i].grad().defined();
  if (std::find(updated.begin(), updated.end(), true) == updated.end()) return;
  steps_.advance(updated);
  // clr per step-count group and dtype, in float64 as the host would, then
  // in the parameter's dtype; eps per dtype.
  std::map<std::pair<size_t, DType>, Tensor> step_sizes;
  std::map<DType, Tensor> eps;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!updated[i]) continue;
    const Tensor& p = params_[i];
    const DType dtype = p.dtype();
    auto [clr, is_new] = step_sizes.try_emplace({steps_.group(i), dtype});
    if (is_new) {
      Tensor decayed = add(mul(sub(steps_.of(i), 1.0), o.lr_decay), 1.0);
      clr->second = cast(div(lr_tensor(DType::kFloat64), decayed), dtype);
    }
    auto [e, is_new_eps] = eps.try_emplace(dtype);
    if (is_new_eps) e->second = full({}, o.eps, dtype);
    follow_param_device(sums_[i], i);
    Tensor g = p.grad();
    if (o.weight_decay != 0) g = add(g, mul(p, o.weight_decay));
    sums_[i].assign_(fused_update(kAccumulate, {sums_[i], g}));
    p.assign_(
        fused_update(programs::kRootMeanSquareStep, {p, g, sums_[i], e->second, clr->second}));
  }
}

}  // namespace tandem::optim
