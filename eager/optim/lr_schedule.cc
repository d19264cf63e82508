#include "eager/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace tandem::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++epoch_;
  optimizer_.set_lr(lr_at(epoch_));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  TANDEM_CHECK(step_size > 0, "StepLR: step_size must be > 0, got ", step_size);
}

double StepLR::lr_at(int64_t epoch) const {
  return base_lr() * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  TANDEM_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be > 0, got ", t_max);
}

double CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double phase = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_);
  return eta_min_ + (base_lr() - eta_min_) * (1 + std::cos(phase)) / 2;
}

}  // namespace tandem::optim
