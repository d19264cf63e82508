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
// shape, dtype and device, created (as zeros) by the constructor.
//
// Devices: make the optimizer after moving the model (`net->to(device)`, then
// `optim::Adam opt(net->parameters(), ...)`), as PyTorch advises. An
// optimizer made before still works: it holds the same handles, so it updates
// the moved parameters, and step() moves a parameter's state to the
// parameter's device the first time they differ (an eager step; a step being
// traced for hybridize cannot move it and throws). The learning rate and
// step counts stay 0-d CPU tensors, which ops on any device accept.
//
// Note [Why optimizer state is tensors updated in place]
// A hybridized training step (docs/ARCHITECTURE.md, "Hybridize") runs step() once
// under a tracer and then replays the recorded ops without running this C++
// code again. The tracer sees only dispatched ops and Tensor::assign_, so:
//  1. Everything that changes from step to step is a tensor rebound with
//     assign_ (state.assign_(new_value)), never a C++ handle set to a new
//     tensor (`buf = add(...)`): a replay would keep reading the value the
//     handle had when traced.
//  2. State is created by the constructor, not on a first step: had the
//     trace been the first step, each replay would create (zero) it again.
//  3. Host numbers that change between steps are tensors too: the learning
//     rate (lr_tensor(), which set_lr() rebinds, so schedules work between
//     replays) and step counts (StepCounts below; Adam's bias corrections
//     1 - beta^t are ops on them). Numbers that never change (betas, eps,
//     momentum, weight decay) stay C++ attributes, captured as constants.
//  4. step() never reads a value on the host (item, to_vector): a trace
//     cannot follow a branch on it.
// The ops that turn these tensors into the update's scalars run once per
// step and dtype (or step-count group), not per parameter, so eager mode
// pays a handful of 0-d ops per step. The arithmetic is the one the host
// did before, in float64, so results are unchanged.
//
// Lifetime: the optimizer keeps handles on the parameters, so the tensors
// live as long as it does; replacing a module's parameter by another tensor
// (rather than assign_) is not seen by an existing optimizer.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tandem::optim {

class Optimizer {
 public:
  // `params`: the tensors to update, usually module->parameters(). Throws
  // tandem::Error if one is undefined, does not require grad or is listed
  // twice (the same tensor handle), or if lr < 0.
  Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient (see the Notes).
  virtual void step() = 0;

  // Clears the gradient of every parameter (call before each backward;
  // gradients accumulate otherwise).
  void zero_grad();

  // The learning rate the next step() uses; schedulers (lr_schedule.h) set it.
  double lr() const { return lr_; }
  // Sets lr() and rebinds every lr_tensor() to it (with assign_, so a replayed
  // step sees it). Throws tandem::Error if lr < 0.
  void set_lr(double lr);
  // lr() as the 0-d tensor of `dtype` that step() computes with; one per
  // dtype of params(), plus float64. The handle stays the same for the
  // optimizer's lifetime. Throws tandem::Error for another dtype.
  const Tensor& lr_tensor(DType dtype) const;

  const std::vector<Tensor>& params() const { return params_; }

 protected:
  // Moves `state` (a tensor of parameter i's state) to the parameter's device
  // when it is elsewhere (see "Devices" above); cheap when it is not.
  void follow_param_device(const Tensor& state, size_t i) const;

  // One fused_elementwise pass (Note [Fused elementwise programs]) of
  // `program` over `inputs`: the update rules of Adam and SGD, each tensor
  // read once instead of once per op.
  static Tensor fused_update(const char* program, std::initializer_list<Tensor> inputs);

  std::vector<Tensor> params_;

 private:
  double lr_;
  std::vector<std::pair<DType, Tensor>> lr_tensors_;
};

// Per-parameter step counts t (how many updates each parameter had), kept as
// few float64 0-d tensors as possible (Note [Why optimizer state is tensors
// updated in place]): parameters updated by the same steps share one tensor,
// its "group". All start in one group at 0. When a step updates only some
// members of a group, the skipped ones move to a new group holding the old
// count (a snapshot, made without an op or a read) and the group advances in
// place. Usually every parameter has a gradient on every step, and there is
// one group for the optimizer's lifetime.
class StepCounts {
 public:
  explicit StepCounts(size_t num_params);

  // Adds 1 to the count of every parameter i with updated[i], with assign_.
  void advance(const std::vector<bool>& updated);

  // The count of parameter i, after the last advance().
  const Tensor& of(size_t i) const { return counts_[group_.at(i)]; }
  // Parameters in the same group share of(i): compute scalars once per group.
  size_t group(size_t i) const { return group_.at(i); }

 private:
  std::vector<Tensor> counts_;  // One per group.
  std::vector<size_t> group_;   // Per parameter.
};

}  // namespace tandem::optim
