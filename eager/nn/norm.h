// Normalization layers: BatchNorm1d, BatchNorm2d and LayerNorm, as in
// torch::nn.
//
//   auto bn = std::make_shared<nn::BatchNorm2d>(16);   // channels
//   Tensor y = bn->forward(x);                         // [N, 16, H, W], same shape out
//   bn->eval();                                        // now uses the running statistics
//
// Note [BatchNorm's running statistics]
// In training mode BatchNorm normalizes with the batch's statistics per
// channel (mean and biased variance over every axis but 1, computed by the
// batch_norm op) and then, under a NoGradGuard, updates its buffers
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var  + momentum var * n / (n - 1)
// where n is the number of values per channel (N H W); the unbiased variance
// is what PyTorch keeps (n = 1 is an Error in training, as there). In eval mode it
// normalizes with running_mean and running_var and changes nothing.
// Parameters (when `affine`): "weight" [C] (ones) and "bias" [C] (zeros);
// buffers: "running_mean" [C] (zeros) and "running_var" [C] (ones).
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

struct BatchNormOptions {
  int64_t num_features = 0;  // C, the channels (axis 1).
  double eps = 1e-5;         // Added to the variance.
  double momentum = 0.1;     // Weight of the new batch in the running statistics.
  bool affine = true;        // Learn weight and bias; otherwise y is just normalized.
  DType dtype = DType::kFloat32;
};

// The common implementation; use BatchNorm1d or BatchNorm2d.
class BatchNorm : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  const BatchNormOptions& options() const { return options_; }
  // Undefined when options().affine is false.
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  const Tensor& running_mean() const { return running_mean_; }
  const Tensor& running_var() const { return running_var_; }

 protected:
  // `ranks`: the input ranks the subclass accepts.
  BatchNorm(const BatchNormOptions& options, std::vector<int> ranks);

 private:
  BatchNormOptions options_;
  std::vector<int> ranks_;
  Tensor weight_, bias_;  // Parameters, or constant ones/zeros when not affine.
  Tensor running_mean_, running_var_;
};

// Over [N, C] or [N, C, L].
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(const BatchNormOptions& options) : BatchNorm(options, {2, 3}) {}
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm1d(BatchNormOptions{num_features, eps, momentum}) {}
  std::string type_name() const override { return "BatchNorm1d"; }
};

// Over [N, C, H, W].
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(const BatchNormOptions& options) : BatchNorm(options, {4}) {}
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm2d(BatchNormOptions{num_features, eps, momentum}) {}
  std::string type_name() const override { return "BatchNorm2d"; }
};

// Normalizes over the trailing dims given by normalized_shape (e.g. {C} for
// [N, T, C], or {C, H, W}) with the mean and biased variance of each sample:
//   y = (x - mean) / sqrt(var + eps) * weight + bias.
// Parameters (when elementwise_affine): "weight" (ones) and "bias" (zeros),
// both of shape normalized_shape. Same in training and eval.
struct LayerNormOptions {
  std::vector<int64_t> normalized_shape;
  double eps = 1e-5;
  bool elementwise_affine = true;
  DType dtype = DType::kFloat32;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(const LayerNormOptions& options);
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5)
      : LayerNorm(LayerNormOptions{std::move(normalized_shape), eps}) {}

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;

  const LayerNormOptions& options() const { return options_; }
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }

 private:
  LayerNormOptions options_;
  Tensor weight_, bias_;  // Parameters, or constant ones/zeros when not affine.
};

}  // namespace tandem::nn
