// optim::RMSprop, following torch.optim.RMSprop. For each parameter p with
// gradient g:
//
//   g = g + weight_decay * p                          (if weight_decay != 0)
//   square_avg = alpha * square_avg + (1 - alpha) * g * g
//   centered:  grad_avg = alpha * grad_avg + (1 - alpha) * g
//              avg = sqrt(square_avg - grad_avg^2) + eps
//   otherwise: avg = sqrt(square_avg) + eps
//   momentum > 0: buf = momentum * buf + g / avg;  p = p - lr * buf
//   otherwise:    p = p - lr * g / avg
//
//   optim::RMSprop opt(net->parameters(), {.lr = 1e-3, .momentum = 0.9});
//
// State (square_avg, grad_avg, the momentum buffer) starts at zero and is
// rebound in place (optimizer.h), so a hybridized step replays it.
#pragma once

#include <vector>

#include "eager/optim/optimizer.h"

namespace tandem::optim {

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;  // In [0, 1).
  double eps = 1e-8;
  double weight_decay = 0;
  double momentum = 0;
  bool centered = false;
};

class RMSprop : public Optimizer {
 public:
  // Throws tandem::Error for alpha outside [0, 1) or negative values.
  explicit RMSprop(std::vector<Tensor> params, const RMSpropOptions& options = {});

  void step() override;

  const RMSpropOptions& options() const { return options_; }
  // The state of params()[i]; grad_avg is undefined unless centered, the
  // momentum buffer unless momentum > 0.
  const Tensor& square_avg(size_t i) const { return state_.at(i).square_avg; }
  const Tensor& grad_avg(size_t i) const { return state_.at(i).grad_avg; }
  const Tensor& momentum_buffer(size_t i) const { return state_.at(i).momentum_buffer; }

 private:
  struct State {
    Tensor square_avg, grad_avg, momentum_buffer;
  };
  RMSpropOptions options_;
  std::vector<State> state_;
};

}  // namespace tandem::optim
