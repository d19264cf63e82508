#include "eager/nn/upsample.h"

#include <cmath>
#include <utility>

#include "core/error.h"

namespace tandem::nn {

Upsample::Upsample(UpsampleOptions options) : options_(std::move(options)) {
  TANDEM_CHECK(options_.size.empty() != options_.scale_factor.empty(),
               "Upsample needs exactly one of size and scale_factor");
  for (double scale : options_.scale_factor) {
    TANDEM_CHECK(std::isfinite(scale) && scale > 0,
                 "Upsample's scale_factor must be positive, got ", scale);
  }
}

Tensor Upsample::forward(const Tensor& x) {
  const int spatial = x.rank() - 2;
  const size_t given = options_.size.empty() ? options_.scale_factor.size() : options_.size.size();
  TANDEM_CHECK(spatial >= 1 && (given == 1 || given == static_cast<size_t>(spatial)),
               "Upsample of ", x.shape().to_string(),
               " needs [N, C, spatial...] with 1 to 3 spatial axes and a ",
               "size or scale_factor for one or each of them, got ", given);
  Dims size;
  for (int k = 0; k < spatial; ++k) {
    const size_t i = given == 1 ? 0 : static_cast<size_t>(k);
    if (!options_.size.empty()) {
      size.push_back(options_.size[i]);
      continue;
    }
    const double scaled =
        std::floor(static_cast<double>(x.shape()[k + 2]) * options_.scale_factor[i]);
    TANDEM_CHECK(scaled >= 1 && scaled < 9.0e18, "Upsample of axis ", k + 2, " of ",
                 x.shape().to_string(), " by ", options_.scale_factor[i], " gives ", scaled,
                 " positions; it needs at least 1");
    size.push_back(static_cast<int64_t>(scaled));
  }
  return interpolate(x, size, options_.mode, options_.align_corners, call_site());
}

std::string Upsample::extra_repr() const {
  std::string text = options_.size.empty() ? "scale_factor=" : "size=";
  if (options_.size.empty()) {
    for (size_t i = 0; i < options_.scale_factor.size(); ++i) {
      text += str_cat(i == 0 ? "" : ", ", options_.scale_factor[i]);
    }
  } else {
    for (size_t i = 0; i < options_.size.size(); ++i) {
      text += str_cat(i == 0 ? "" : ", ", options_.size[i]);
    }
  }
  return str_cat(text, ", mode=", options_.mode,
                 options_.align_corners ? ", align_corners=true" : "");
}

}  // namespace tandem::nn
