// nn::Embedding: a lookup table of learned vectors, as torch::nn::Embedding.
//
//   auto embed = std::make_shared<nn::Embedding>(10000, 64);   // vocabulary, dim
//   Tensor tokens = Tensor::from_vector<int64_t>({5, 17, 3}, {1, 3});
//   embed->forward(tokens);                                    // [1, 3] -> [1, 3, 64]
//
// Parameter "weight" [num_embeddings, embedding_dim], initialized normal(0, 1).
// Input: int64 indices of any shape, each in [0, num_embeddings); output: the
// input's shape plus [embedding_dim].
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype = DType::kFloat32);

  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  Tensor weight_;
};

}  // namespace tandem::nn
