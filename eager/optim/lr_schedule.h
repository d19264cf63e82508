// Learning-rate schedules, as torch.optim.lr_scheduler: each step() (usually
// once per epoch) sets the optimizer's lr() for the next epoch.
//
//   optim::SGD opt(net->parameters(), 0.1);
//   optim::StepLR schedule(opt, /*step_size=*/30, /*gamma=*/0.1);
//   for (int epoch = 0; epoch < 90; ++epoch) {
//     train_one_epoch(net, opt);
//     schedule.step();        // lr 0.1 for epochs 0-29, 0.01 for 30-59, 0.001 after
//   }
//
// The base learning rate is the optimizer's lr() when the schedule is made.
// Schedules compute lr from the epoch count in closed form, so a manual
// set_lr() in between is overwritten by the next step(). Lifetime: a schedule
// keeps a reference to its optimizer, which must outlive it.
#pragma once

#include <cstdint>
#include <functional>

#include "eager/optim/optimizer.h"

namespace tandem::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer);
  virtual ~LRScheduler() = default;

  // Advances the epoch count and sets optimizer.lr() to lr_at(epoch()).
  void step();
  // The number of step() calls so far.
  int64_t epoch() const { return epoch_; }
  double base_lr() const { return base_lr_; }
  // The learning rate for a given epoch (epoch 0: base_lr(), except where a
  // schedule says otherwise).
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
  // Sets the optimizer's lr to lr_at(0): for schedules whose epoch 0 is not
  // base_lr(), called at the end of their constructor (as torch's schedulers
  // take their first step when made).
  void start();

  Optimizer& optimizer_;

 private:
  double base_lr_;
  int64_t epoch_ = 0;
};

// lr = base_lr * gamma ^ floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  // Throws tandem::Error unless step_size > 0.
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2,
// from base_lr at epoch 0 down to eta_min at epoch T_max (and back up after,
// as PyTorch's closed form does).
class CosineAnnealingLR : public LRScheduler {
 public:
  // Throws tandem::Error unless t_max > 0.
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// lr = base_lr * factor(epoch), as torch's LambdaLR.
class LambdaLR : public LRScheduler {
 public:
  // Throws tandem::Error if `factor` is empty.
  LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor);
  double lr_at(int64_t epoch) const override;

 private:
  std::function<double(int64_t)> factor_;
};

// Linear warm-up from 0 over `warmup_steps`, then a cosine from base_lr down
// to eta_min at `total_steps` (the schedule transformers are usually trained
// with; stepped once per batch):
//   epoch <  warmup: base_lr * epoch / warmup_steps
//   epoch >= warmup: eta_min + (base_lr - eta_min) * (1 + cos(pi * progress)) / 2,
//                    progress = (epoch - warmup) / (total - warmup), at most 1.
class WarmupCosineLR : public LRScheduler {
 public:
  // Throws tandem::Error unless 0 <= warmup_steps < total_steps.
  WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                 double eta_min = 0);
  double lr_at(int64_t epoch) const override;

 private:
  int64_t warmup_steps_, total_steps_;
  double eta_min_;
};

// The 1cycle policy, as torch's OneCycleLR with cosine annealing (two
// phases), stepped once per batch: from max_lr / div_factor up to max_lr
// over the first pct_start of total_steps, then down to
// max_lr / div_factor / final_div_factor. It ignores the optimizer's lr and
// sets lr_at(0) when made; stepping past total_steps is a tandem::Error.
struct OneCycleOptions {
  double max_lr = 0;
  int64_t total_steps = 0;
  double pct_start = 0.3;
  double div_factor = 25;
  double final_div_factor = 1e4;
};

class OneCycleLR : public LRScheduler {
 public:
  // Throws tandem::Error unless max_lr > 0, total_steps > 0, pct_start in
  // (0, 1) and both factors > 0.
  OneCycleLR(Optimizer& optimizer, const OneCycleOptions& options);
  double lr_at(int64_t epoch) const override;

 private:
  OneCycleOptions options_;
};

}  // namespace tandem::optim
