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
  // The learning rate for a given epoch (epoch 0: base_lr()).
  virtual double lr_at(int64_t epoch) const = 0;

 protected:
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

}  // namespace tandem::optim
