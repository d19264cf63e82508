#include "eager/nn/sequential.h"

namespace tandem::nn {

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const std::source_location where = call_site();
  for (const auto& module : *this) y = (*module)(y, where);
  return y;
}

}  // namespace tandem::nn
