// nn::Flatten: merges axes start_dim..end_dim into one, as torch::nn::Flatten.
// The default keeps the batch axis: [N, C, H, W] -> [N, C * H * W], the bridge
// from convolutions to Linear layers.
//
//   nn::Sequential net(nn::Conv2d(1, 8, 3), nn::ReLU(), nn::Flatten(), nn::Linear(8 * 26 * 26,
//   10));
//
// Negative axes count from the end. No parameters.
#pragma once

#include <cstdint>

#include "eager/nn/module.h"

namespace tandem::nn {

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim_(start_dim), end_dim_(end_dim) {}

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

}  // namespace tandem::nn
