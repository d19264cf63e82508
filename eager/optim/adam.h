// optim::Adam and optim::AdamW, following torch.optim.Adam / AdamW exactly.
// For each parameter p with gradient g, at its step t = 1, 2, ...:
//
//   Adam:  g = g + weight_decay * p               (L2 penalty in the gradient)
//   AdamW: p = p * (1 - lr * weight_decay)        (decoupled weight decay)
//   m = beta1 * m + (1 - beta1) * g               (m, v start at zero)
//   v = beta2 * v + (1 - beta2) * g * g
//   v_max = max(v_max, v); use v_max for v below  (if amsgrad)
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
//   optim::Adam adam(net->parameters());                                   // lr 1e-3
//   optim::AdamW adamw(net->parameters(), {.lr = 3e-4, .weight_decay = 0.05});
//
// See optimizer.h for how parameters are updated and which are skipped (a
// skipped parameter's t does not advance), and why the state, t and lr are
// tensors updated in place (so a hybridized step can replay the update).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "eager/optim/optimizer.h"

namespace tandem::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};  // Each in [0, 1).
  double eps = 1e-8;
  double weight_decay = 0;
  bool amsgrad = false;
};

// The same fields; only the weight_decay default differs.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
};

class Adam : public Optimizer {
 public:
  // Throws tandem::Error for betas outside [0, 1) or negative eps/weight_decay.
  explicit Adam(std::vector<Tensor> params, const AdamOptions& options = {});

  void step() override;

  // lr() is the live value; options().lr is the initial one.
  const AdamOptions& options() const { return options_; }
  // The state of params()[i]: its step count t (read from the tensor, so
  // this waits for pending steps), its moment estimates (zeros before its
  // first update) and, with amsgrad, the running maximum of exp_avg_sq
  // (undefined without). The handles stay the same for the optimizer's
  // lifetime; each step rebinds them with assign_.
  int64_t step_count(size_t i) const;
  const Tensor& exp_avg(size_t i) const { return state_.at(i).exp_avg; }
  const Tensor& exp_avg_sq(size_t i) const { return state_.at(i).exp_avg_sq; }
  const Tensor& max_exp_avg_sq(size_t i) const { return state_.at(i).max_exp_avg_sq; }
  // t of params()[i] as a float64 0-d tensor, shared by parameters updated by
  // the same steps.
  const Tensor& step_count_tensor(size_t i) const { return steps_.of(i); }

 protected:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled_weight_decay);

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  struct StepScalars;
  // One parameter's update within step().
  void update(size_t i, StepScalars& scalars);
  AdamOptions options_;
  bool decoupled_;  // AdamW.
  std::vector<State> state_;
  StepCounts steps_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {})
      : Adam(std::move(params),
             AdamOptions{options.lr, options.betas, options.eps, options.weight_decay,
                         options.amsgrad},
             /*decoupled_weight_decay=*/true) {}
};

}  // namespace tandem::optim
