#include "eager/optim/optimizer.h"

#include "core/error.h"

namespace tandem::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    TANDEM_CHECK(params_[i].defined(), "optimizer parameter ", i, " is an undefined tensor");
    TANDEM_CHECK(params_[i].requires_grad(), "optimizer parameter ", i, " (",
                 params_[i].shape().to_string(),
                 ") does not require grad; call requires_grad_() or pass module->parameters()");
  }
  set_lr(lr);
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad_();
}

void Optimizer::set_lr(double lr) {
  TANDEM_CHECK(lr >= 0, "learning rate must be >= 0, got ", lr);
  lr_ = lr;
}

}  // namespace tandem::optim
