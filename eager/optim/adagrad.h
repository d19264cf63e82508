// optim::Adagrad, following torch.optim.Adagrad. For each parameter p with
// gradient g, at its step t = 1, 2, ...:
//
//   g = g + weight_decay * p                       (if weight_decay != 0)
//   clr = lr / (1 + (t - 1) * lr_decay)
//   sum = sum + g * g                              (sum starts at initial_accumulator_value)
//   p = p - clr * g / (sqrt(sum) + eps)
//
//   optim::Adagrad opt(net->parameters(), {.lr = 0.1});
//
// The sums and step counts are tensors rebound in place (optimizer.h), so a
// hybridized step replays them.
#pragma once

#include <vector>

#include "eager/optim/optimizer.h"

namespace tandem::optim {

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0;
  double weight_decay = 0;
  double initial_accumulator_value = 0;
  double eps = 1e-10;
};

class Adagrad : public Optimizer {
 public:
  // Throws tandem::Error for negative values.
  explicit Adagrad(std::vector<Tensor> params, const AdagradOptions& options = {});

  void step() override;

  const AdagradOptions& options() const { return options_; }
  // The running sum of squared gradients of params()[i].
  const Tensor& sum(size_t i) const { return sums_.at(i); }

 private:
  AdagradOptions options_;
  std::vector<Tensor> sums_;
  StepCounts steps_;
};

}  // namespace tandem::optim
