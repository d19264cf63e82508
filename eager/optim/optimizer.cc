#include "eager/optim/optimizer.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"
#include "eager/ops.h"
#include "kernels/dispatch.h"
#include "kernels/known_ops.h"

namespace tandem::optim {
namespace {

void check_lr(double lr) { TANDEM_CHECK(lr >= 0, "learning rate must be >= 0, got ", lr); }

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)), lr_(lr) {
  for (size_t i = 0; i < params_.size(); ++i) {
    TANDEM_CHECK(params_[i].defined(), "optimizer parameter ", i, " is an undefined tensor");
    TANDEM_CHECK(params_[i].requires_grad(), "optimizer parameter ", i, " (",
                 params_[i].shape().to_string(),
                 ") does not require grad; call requires_grad_() or pass module->parameters()");
  }
  // A tensor listed twice would be stepped twice per step() (as two tensors
  // sharing one gradient): refused, like torch.optim's duplicate check.
  absl::flat_hash_map<const TensorImpl*, size_t> first_index;
  for (size_t i = 0; i < params_.size(); ++i) {
    auto [it, added] = first_index.try_emplace(params_[i].impl_ptr().get(), i);
    TANDEM_CHECK(added, "optimizer parameters ", it->second, " and ", i, " are the same tensor (",
                 params_[i].shape().to_string(), "); list each parameter once");
  }
  check_lr(lr);
  // float64 always: optimizers compute their per-step scalars in it.
  lr_tensors_.emplace_back(DType::kFloat64, full({}, lr, DType::kFloat64));
  for (const Tensor& p : params_) {
    const DType dtype = p.dtype();
    if (std::none_of(lr_tensors_.begin(), lr_tensors_.end(),
                     [&](const auto& entry) { return entry.first == dtype; })) {
      lr_tensors_.emplace_back(dtype, full({}, lr, dtype));
    }
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.zero_grad_();
}

void Optimizer::set_lr(double lr) {
  check_lr(lr);
  lr_ = lr;
  for (const auto& [dtype, tensor] : lr_tensors_) tensor.assign_(full({}, lr, dtype));
}

Tensor Optimizer::fused_update(const char* program, std::initializer_list<Tensor> inputs) {
  return kernels::call1(kernels::fused_elementwise_op(),
                        absl::Span<const Tensor>(inputs.begin(), inputs.size()),
                        {{"program", std::string(program)}}, std::source_location::current());
}

void Optimizer::follow_param_device(const Tensor& state, size_t i) const {
  if (state.defined() && state.device() != params_[i].device()) {
    move_to_(state, params_[i].device());
  }
}

const Tensor& Optimizer::lr_tensor(DType dtype) const {
  auto it = std::find_if(lr_tensors_.begin(), lr_tensors_.end(),
                         [&](const auto& entry) { return entry.first == dtype; });
  TANDEM_CHECK(it != lr_tensors_.end(), "the optimizer keeps no ", dtype_name(dtype),
               " learning rate: none of its parameters has that dtype");
  return it->second;
}

StepCounts::StepCounts(size_t num_params) : group_(num_params, 0) {
  counts_.push_back(zeros({}, DType::kFloat64));
}

void StepCounts::advance(const std::vector<bool>& updated) {
  TANDEM_INTERNAL_ASSERT(updated.size() == group_.size(), "got ", updated.size(), " flags for ",
                         group_.size(), " parameters");
  const size_t num_groups = counts_.size();
  std::vector<bool> advances(num_groups, false);
  for (size_t i = 0; i < group_.size(); ++i) {
    if (updated[i]) advances[group_[i]] = true;
  }
  // Skipped members of an advancing group keep the current count in a new one.
  std::vector<size_t> split(num_groups, num_groups);
  for (size_t i = 0; i < group_.size(); ++i) {
    const size_t g = group_[i];
    if (updated[i] || !advances[g]) continue;
    if (split[g] == num_groups) {
      split[g] = counts_.size();
      counts_.push_back(counts_[g].snapshot());
    }
    group_[i] = split[g];
  }
  for (size_t g = 0; g < num_groups; ++g) {
    if (advances[g]) counts_[g].assign_(add(counts_[g], 1.0));
  }
}

}  // namespace tandem::optim
