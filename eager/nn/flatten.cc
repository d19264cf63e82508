#include "eager/nn/flatten.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim_, end_dim_, call_site()); }

std::string Flatten::extra_repr() const {
  return str_cat("start_dim=", start_dim_, ", end_dim=", end_dim_);
}

}  // namespace tandem::nn
