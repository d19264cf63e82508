// nn::Linear: y = x W^T + b, as torch::nn::Linear.
//
//   auto fc = std::make_shared<nn::Linear>(784, 10);   // in, out
//   Tensor y = fc->forward(x);                         // [N, 784] -> [N, 10]
//   fc->weight();                                      // [10, 784], "weight"
//   fc->bias();                                        // [10], "bias"
//
// Parameters: "weight" [out_features, in_features], initialized
// kaiming_uniform_(a = sqrt(5)), i.e. uniform in +-1/sqrt(in_features); and,
// when `bias`, "bias" [out_features], uniform in +-1/sqrt(in_features).
// Input [..., in_features]; output [..., out_features]; float32 by default.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

struct LinearOptions {
  int64_t in_features = 0;
  int64_t out_features = 0;
  bool bias = true;
  DType dtype = DType::kFloat32;  // Of the parameters.
};

class Linear : public Module {
 public:
  explicit Linear(const LinearOptions& options);
  Linear(int64_t in_features, int64_t out_features, bool bias = true)
      : Linear(LinearOptions{in_features, out_features, bias}) {}

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;

  const LinearOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  // Undefined when options().bias is false.
  const Tensor& bias() const { return bias_; }

 private:
  LinearOptions options_;
  Tensor weight_;
  Tensor bias_;
  Tensor zero_bias_;  // Stands in for bias_ when there is none; not a parameter.
};

}  // namespace tandem::nn
