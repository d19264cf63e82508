// optim::Optimizer: the base of SGD, Adam and AdamW, as torch::optim::Optimizer.
//
//   auto net = std::make_shared<nn::Sequential>(nn::Linear(4, 16), nn::ReLU(), nn::Linear(16, 3));
//   optim::Adam opt(net->parameters(), optim::AdamOptions{.lr = 1e-3});
//   for (auto& [x, y] : batches) {
//     opt.zero_grad();
//     Tensor loss = cross_entropy(net->forward(x), y);
//     loss.backward();
//     opt.step();
//   }
//
// Note [How optimizers update parameters]
// step() computes each new value with the eager ops under a NoGradGuard (so
// nothing is recorded on the tape) and rebinds the parameter to it with
// Tensor::assign_: the module's member, its parameters() and the optimizer all
// hold the same handle and see the new value; its requires_grad and grad stay.
// Parameters whose grad() is undefined (unused in the last backward) are
// skipped: neither they nor their state change. Per-parameter state
// (momentum buffers, moment estimates) is made of tensors of the parameter's
// shape and dtype, created on a parameter's first update.
//
// Lifetime: the optimizer keeps handles on the parameters, so the tensors
// live as long as it does; replacing a module's parameter by another tensor
// (rather than assign_) is not seen by an existing optimizer.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tandem::optim {

class Optimizer {
 public:
  // `params`: the tensors to update, usually module->parameters(). Throws
  // tandem::Error if one is undefined or does not require grad, or if lr < 0.
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (see the Note).
  virtual void step() = 0;

  // Clears the gradient of every parameter (call before each backward;
  // gradients accumulate otherwise).
  void zero_grad();

  // The learning rate the next step() uses; schedulers (lr_schedule.h) set it.
  double lr() const { return lr_; }
  // Throws tandem::Error if lr < 0.
  void set_lr(double lr);

  const std::vector<Tensor>& params() const { return params_; }

 protected:
  std::vector<Tensor> params_;

 private:
  double lr_;
};

}  // namespace tandem::optim
