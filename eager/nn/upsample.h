// nn::Upsample: resizes the spatial axes of [N, C, spatial...] (1 to 3 of
// them), as torch::nn::Upsample, by a fixed output size or by scale factors
// (the output size is floor(input * scale) per axis).
//
//   nn::Upsample up({.scale_factor = {2}, .mode = "bilinear"});  // [N, C, H, W] -> [N, C, 2H, 2W]
//
// Modes are "nearest" and "linear" / "bilinear" / "trilinear", with
// align_corners for the linear ones (interpolate in eager/ops.h). With scale
// factors, the coordinates follow the sizes (input / output), as torch's
// recompute_scale_factor=True: the same as the factor itself whenever
// input * scale is whole. No parameters.
#pragma once

#include <string>
#include <vector>

#include "eager/nn/module.h"
#include "eager/ops.h"

namespace tandem::nn {

struct UpsampleOptions {
  Dims size = {};                         // Per spatial axis, or one for all.
  std::vector<double> scale_factor = {};  // The same; give size or scale_factor.
  std::string mode = "nearest";
  bool align_corners = false;
};

class Upsample : public Module {
 public:
  explicit Upsample(UpsampleOptions options);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Upsample"; }
  std::string extra_repr() const override;

 private:
  UpsampleOptions options_;
};

}  // namespace tandem::nn
