#include "eager/nn/dropout.h"

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

Dropout::Dropout(double p) : p_(p) {
  TANDEM_CHECK(p >= 0 && p < 1, "Dropout needs 0 <= p < 1, got ", p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p_, is_training(), call_site()); }

std::string Dropout::extra_repr() const { return str_cat("p=", p_); }

}  // namespace tandem::nn
