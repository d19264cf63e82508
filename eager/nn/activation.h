// Activation layers, as in torch::nn: modules without parameters that apply
// the eager op of the same name elementwise (any shape in, same shape out).
// They let an activation sit in a Sequential:
//
//   nn::Sequential mlp(nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10));
//
// ReLU:      max(x, 0)
// LeakyReLU: x for x > 0, negative_slope * x otherwise
// GELU:      x * Phi(x), Phi the standard normal CDF
// Sigmoid:   1 / (1 + exp(-x))
// Tanh:      tanh(x)
#pragma once

#include "eager/nn/module.h"

namespace tandem::nn {

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ReLU"; }
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : negative_slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope() const { return negative_slope_; }

 private:
  double negative_slope_;
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "GELU"; }
};

class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sigmoid"; }
};

class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Tanh"; }
};

}  // namespace tandem::nn
