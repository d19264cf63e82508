#include "eager/optim/clip_grad.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/ops.h"

namespace tandem::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm) {
  TANDEM_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be > 0, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads, owners;
  for (const Tensor& p : params) {
    if (p.defined() && p.grad().defined()) {
      grads.push_back(p.grad());
      owners.push_back(p);
    }
  }
  if (grads.empty()) return Tensor();
  Tensor total_sq;
  for (const Tensor& g : grads) {
    Tensor s = sum(square(g));
    total_sq = total_sq.defined() ? add(total_sq, cast(s, total_sq.dtype())) : s;
  }
  Tensor total = sqrt(total_sq);
  // min(1, max_norm / (total + 1e-6)), as a tensor: no wait for the value.
  Tensor coef =
      minimum(div(full({}, max_norm, total.dtype()), add(total, 1e-6)), ones({}, total.dtype()));
  // Replace each parameter's grad handle rather than assign_ into it: two
  // parameters' grads may share one handle (e.g. both inputs of an add).
  for (size_t i = 0; i < grads.size(); ++i) {
    owners[i].impl_ptr()->autograd->grad = mul(grads[i], cast(coef, grads[i].dtype()));
  }
  return total;
}

}  // namespace tandem::optim
