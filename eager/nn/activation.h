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
// Softplus, Softsign, ELU, SELU, CELU, Hardsigmoid, Hardswish, Mish, SiLU:
// as in torch::nn, each over the eager op of the same name.
// Softmax: along `dim` (torch::nn's argument; no default here, as torch's
// own warns against the implicit one).
#pragma once

#include "core/error.h"
#include "eager/nn/module.h"
#include "eager/ops.h"

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

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;
  int64_t dim() const { return dim_; }

 private:
  int64_t dim_;
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

// log(1 + e^(beta x)) / beta, and x where beta x > threshold.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0)
      : beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta_, threshold_); }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override {
    return str_cat("beta=", beta_, ", threshold=", threshold_);
  }

 private:
  double beta_, threshold_;
};

// x / (1 + |x|)
class Softsign : public Module {
 public:
  Tensor forward(const Tensor& x) override { return softsign(x); }
  std::string type_name() const override { return "Softsign"; }
};

// x for x > 0, alpha * (e^x - 1) otherwise
class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return elu(x, alpha_); }
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override { return str_cat("alpha=", alpha_); }
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

// scale * elu(x, alpha) with the self-normalizing constants
class SELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return selu(x); }
  std::string type_name() const override { return "SELU"; }
};

// x for x > 0, alpha * (e^(x/alpha) - 1) otherwise
class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0) : alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return celu(x, alpha_); }
  std::string type_name() const override { return "CELU"; }
  std::string extra_repr() const override { return str_cat("alpha=", alpha_); }
  double alpha() const { return alpha_; }

 private:
  double alpha_;
};

// min(max(x + 3, 0), 6) / 6
class Hardsigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
  std::string type_name() const override { return "Hardsigmoid"; }
};

// x * min(max(x + 3, 0), 6) / 6
class Hardswish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return hardswish(x); }
  std::string type_name() const override { return "Hardswish"; }
};

// x * tanh(softplus(x))
class Mish : public Module {
 public:
  Tensor forward(const Tensor& x) override { return mish(x); }
  std::string type_name() const override { return "Mish"; }
};

// x * sigmoid(x)
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string type_name() const override { return "SiLU"; }
};

}  // namespace tandem::nn
