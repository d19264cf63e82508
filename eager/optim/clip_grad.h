// Gradient clipping, as torch::nn::utils::clip_grad_norm_: call between
// backward() and step() to bound the size of an update.
//
//   loss.backward();
//   optim::clip_grad_norm_(net->parameters(), /*max_norm=*/1.0);
//   opt.step();
#pragma once

#include <vector>

#include "core/tensor.h"

namespace tandem::optim {

// Scales every defined grad() of `params` by min(1, max_norm / (total + 1e-6)),
// where total is the L2 norm of all those gradients taken together, and
// returns total (a scalar tensor of the first gradient's dtype; undefined
// when no parameter has a gradient). Each parameter's grad() becomes a new
// tensor; nothing waits for values. Throws tandem::Error if max_norm <= 0.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

}  // namespace tandem::optim
