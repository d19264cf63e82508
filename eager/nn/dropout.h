// nn::Dropout, as torch::nn::Dropout.
//
//   auto drop = std::make_shared<nn::Dropout>(0.5);
//   drop->forward(x);   // training: each element zeroed with probability p,
//                       // the rest scaled by 1 / (1 - p)
//   drop->eval();
//   drop->forward(x);   // eval: x itself
//
// The mask comes from the global generator (tandem::manual_seed). No
// parameters; any shape in, same shape out.
#pragma once

#include "eager/nn/module.h"

namespace tandem::nn {

class Dropout : public Module {
 public:
  // Throws tandem::Error unless 0 <= p < 1.
  explicit Dropout(double p = 0.5);

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace tandem::nn
