// nn::Identity, as torch::nn::Identity: returns its input. A placeholder
// where a model's structure wants a layer and a configuration wants none
// (a head replaced for feature extraction, an optional norm).
#pragma once

#include "eager/nn/module.h"

namespace tandem::nn {

class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }
};

}  // namespace tandem::nn
