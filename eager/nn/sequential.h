// nn::Sequential: runs its modules one after another, each one's output the
// next one's input, as torch::nn::Sequential.
//
//   auto net = std::make_shared<nn::Sequential>(
//       nn::Conv2d(1, 8, 3, 1, 1), nn::BatchNorm2d(8), nn::ReLU(), nn::MaxPool2d(2),
//       nn::Flatten(), nn::Linear(8 * 14 * 14, 10));
//   Tensor logits = net->forward(images);        // [N, 1, 28, 28] -> [N, 10]
//   net->named_parameters();                     // "0.weight", "0.bias", "1.weight", ...
//   auto conv = net->at<nn::Conv2d>(0);          // typed access to a child
//
// It is a ModuleList (containers.h) with a forward: modules are passed by
// value (moved into a new shared_ptr) or as a std::shared_ptr (shared, e.g.
// to keep a handle on a layer), and named by their position, "0", "1", ...
// unless push_back is given a name. An empty Sequential is the identity.
#pragma once

#include <utility>

#include "eager/nn/containers.h"

namespace tandem::nn {

class Sequential : public ModuleList {
 public:
  Sequential() = default;
  template <ModuleArg... Ms>
  requires(sizeof...(Ms) > 0) explicit Sequential(Ms&&... modules)
      : ModuleList(std::forward<Ms>(modules)...) {}

  // Each module's forward, in order.
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
};

}  // namespace tandem::nn
