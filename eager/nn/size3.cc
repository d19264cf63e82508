#include "eager/nn/size3.h"

#include "core/error.h"

namespace tandem::nn {

std::string Size3::to_string() const {
  return d == h && h == w ? str_cat(d) : str_cat("(", d, ", ", h, ", ", w, ")");
}

}  // namespace tandem::nn
