#include "eager/nn/size2.h"

#include "core/error.h"

namespace tandem::nn {

std::string Size2::to_string() const { return h == w ? str_cat(h) : str_cat("(", h, ", ", w, ")"); }

}  // namespace tandem::nn
