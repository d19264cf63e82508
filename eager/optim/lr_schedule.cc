#include "eager/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "core/error.h"

namespace tandem::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer), base_lr_(optimizer.lr()) {}

void LRScheduler::step() {
  ++epoch_;
  optimizer_.set_lr(lr_at(epoch_));
}

void LRScheduler::start() { optimizer_.set_lr(lr_at(0)); }

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

LambdaLR::LambdaLR(Optimizer& optimizer, std::function<double(int64_t)> factor)
    : LRScheduler(optimizer), factor_(std::move(factor)) {
  TANDEM_CHECK(factor_ != nullptr, "LambdaLR: the factor function is empty");
  start();
}

double LambdaLR::lr_at(int64_t epoch) const { return base_lr() * factor_(epoch); }

namespace {

// From `from` at progress 0 to `to` at progress 1 along half a cosine.
double cosine_between(double from, double to, double progress) {
  return to + (from - to) * (1 + std::cos(std::numbers::pi * progress)) / 2;
}

}  // namespace

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, int64_t warmup_steps, int64_t total_steps,
                               double eta_min)
    : LRScheduler(optimizer),
      warmup_steps_(warmup_steps),
      total_steps_(total_steps),
      eta_min_(eta_min) {
  TANDEM_CHECK(warmup_steps >= 0 && warmup_steps < total_steps,
               "WarmupCosineLR needs 0 <= warmup_steps < total_steps, got ", warmup_steps, " and ",
               total_steps);
  start();
}

double WarmupCosineLR::lr_at(int64_t epoch) const {
  if (epoch < warmup_steps_) {
    return base_lr() * static_cast<double>(epoch) / static_cast<double>(warmup_steps_);
  }
  const double progress = std::min(1.0, static_cast<double>(epoch - warmup_steps_) /
                                            static_cast<double>(total_steps_ - warmup_steps_));
  return cosine_between(base_lr(), eta_min_, progress);
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleOptions& options)
    : LRScheduler(optimizer), options_(options) {
  const OneCycleOptions& o = options;
  TANDEM_CHECK(o.max_lr > 0 && o.total_steps > 0 && o.pct_start > 0 && o.pct_start < 1 &&
                   o.div_factor > 0 && o.final_div_factor > 0,
               "OneCycleLR needs max_lr > 0, total_steps > 0, pct_start in (0, 1) and positive "
               "div factors, got max_lr ",
               o.max_lr, ", total_steps ", o.total_steps, ", pct_start ", o.pct_start);
  start();
}

double OneCycleLR::lr_at(int64_t epoch) const {
  const OneCycleOptions& o = options_;
  TANDEM_CHECK(epoch <= o.total_steps, "OneCycleLR: stepped ", epoch, " times, but total_steps is ",
               o.total_steps);
  const double initial = o.max_lr / o.div_factor, last = initial / o.final_div_factor;
  // The phases end at steps pct_start * total - 1 and total - 1, as torch's.
  const double warm_end = o.pct_start * static_cast<double>(o.total_steps) - 1;
  const double end = static_cast<double>(o.total_steps - 1);
  const double step = static_cast<double>(epoch);
  if (warm_end > 0 && step <= warm_end) return cosine_between(initial, o.max_lr, step / warm_end);
  return cosine_between(o.max_lr, last, (step - warm_end) / (end - warm_end));
}

}  // namespace tandem::optim
