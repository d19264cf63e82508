// nn::Embedding: a lookup table of learned vectors, as torch::nn::Embedding.
//
//   auto embed = std::make_shared<nn::Embedding>(10000, 64);   // vocabulary, dim
//   Tensor tokens = Tensor::from_vector<int64_t>({5, 17, 3}, {1, 3});
//   embed->forward(tokens);                                    // [1, 3] -> [1, 3, 64]
//
// Parameter "weight" [num_embeddings, embedding_dim], initialized normal(0, 1).
// Input: int64 indices of any shape, each in [0, num_embeddings); output: the
// input's shape plus [embedding_dim].
//
// With a padding_idx (as torch's; negative counts from the end), that row
// starts at zero, the positions holding it get a zero vector and no
// gradient flows to it, so padding never trains. (The output is masked,
// rather than the row read: a row that was changed by hand still gives
// zeros.)
#pragma once

#include <cstdint>
#include <optional>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype = DType::kFloat32,
            std::optional<int64_t> padding_idx = std::nullopt);

  Tensor forward(const Tensor& indices) override;
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;

  const Tensor& weight() const { return weight_; }
  // In [0, num_embeddings) when set.
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  std::optional<int64_t> padding_idx_;
  Tensor weight_;
};

}  // namespace tandem::nn
