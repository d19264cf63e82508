// optim::SGD: stochastic gradient descent with momentum, dampening, weight
// decay and Nesterov momentum, following torch.optim.SGD exactly. For each
// parameter p with gradient g, learning rate lr:
//
//   g = g + weight_decay * p                      (if weight_decay != 0)
//   if momentum != 0:
//     buf = g                                     (first step)
//     buf = momentum * buf + (1 - dampening) * g  (later steps)
//     g = g + momentum * buf   if nesterov, else   g = buf
//   p = p - lr * g
//
//   optim::SGD opt(net->parameters(), 0.1);                          // plain
//   optim::SGD opt2(net->parameters(), {.lr = 0.1, .momentum = 0.9, .nesterov = true});
//
// See optimizer.h for how parameters are updated and which are skipped, and
// why the momentum buffers and lr are tensors updated in place. The buffers
// start at zero, so without dampening "buf = g" is the general rule's first
// step; with dampening, the first step's (1 - dampening) is 1, from a step
// count tensor.
#pragma once

#include <optional>
#include <vector>

#include "eager/optim/optimizer.h"

namespace tandem::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;  // L2 penalty, added to the gradient.
  bool nesterov = false;    // Needs momentum > 0 and dampening == 0.
};

class SGD : public Optimizer {
 public:
  // Throws tandem::Error for negative values or nesterov without momentum
  // (or with dampening).
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  SGD(std::vector<Tensor> params, double lr, double momentum = 0, double dampening = 0,
      double weight_decay = 0, bool nesterov = false)
      : SGD(std::move(params), SGDOptions{lr, momentum, dampening, weight_decay, nesterov}) {}

  void step() override;

  // lr() is the live value; options().lr is the initial one.
  const SGDOptions& options() const { return options_; }
  // The momentum buffer of params()[i]: zeros before its first update,
  // undefined without momentum. The handle stays the same for the
  // optimizer's lifetime; each step rebinds it with assign_.
  const Tensor& momentum_buffer(size_t i) const { return momentum_buffers_.at(i); }

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_buffers_;
  // Only with momentum and dampening: which step is a parameter's first.
  std::optional<StepCounts> steps_;
};

}  // namespace tandem::optim
