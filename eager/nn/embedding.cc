#include "eager/nn/embedding.h"

#include "core/error.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  TANDEM_CHECK(num_embeddings > 0 && embedding_dim > 0,
               "Embedding needs positive num_embeddings and embedding_dim, got ", num_embeddings,
               " and ", embedding_dim);
  weight_ = register_parameter("weight", Tensor::empty({num_embeddings, embedding_dim}, dtype));
  init::normal_(weight_);
}

Tensor Embedding::forward(const Tensor& indices) {
  TANDEM_CHECK(indices.dtype() == DType::kInt64, "Embedding expects int64 indices, got ",
               dtype_name(indices.dtype()));
  return embedding(weight_, indices, call_site());
}

std::string Embedding::extra_repr() const { return str_cat(num_embeddings_, ", ", embedding_dim_); }

}  // namespace tandem::nn
