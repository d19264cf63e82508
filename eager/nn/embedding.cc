#include "eager/nn/embedding.h"

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/nn/init.h"
#include "eager/ops.h"

namespace tandem::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype,
                     std::optional<int64_t> padding_idx)
    : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {
  TANDEM_CHECK(num_embeddings > 0 && embedding_dim > 0,
               "Embedding needs positive num_embeddings and embedding_dim, got ", num_embeddings,
               " and ", embedding_dim);
  if (padding_idx) {
    TANDEM_CHECK(*padding_idx >= -num_embeddings && *padding_idx < num_embeddings,
                 "Embedding: padding_idx ", *padding_idx, " is out of range for ", num_embeddings,
                 " embeddings");
    padding_idx_ = *padding_idx < 0 ? *padding_idx + num_embeddings : *padding_idx;
  }
  weight_ = register_parameter("weight", Tensor::empty({num_embeddings, embedding_dim}, dtype));
  init::normal_(weight_);
  if (padding_idx_) {  // The padding row starts at zero.
    NoGradGuard no_grad;
    Tensor row = reshape(arange(0, static_cast<double>(num_embeddings), 1, DType::kInt64),
                         {num_embeddings, 1});
    Tensor is_padding = eq(row, full({}, static_cast<double>(*padding_idx_), DType::kInt64));
    weight_.assign_(where(is_padding, zeros({}, dtype), weight_));
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  TANDEM_CHECK(indices.dtype() == DType::kInt64, "Embedding expects int64 indices, got ",
               dtype_name(indices.dtype()));
  const std::source_location site = call_site();
  Tensor rows = embedding(weight_, indices, site);
  if (!padding_idx_) return rows;
  // Zero where the index is padding_idx, and so no gradient to that row.
  Dims keep_shape(indices.shape().begin(), indices.shape().end());
  keep_shape.push_back(1);
  Tensor keep = ne(indices, full({}, static_cast<double>(*padding_idx_), DType::kInt64), site);
  return mul(rows, cast(reshape(keep, keep_shape, site), rows.dtype(), site), site);
}

std::string Embedding::extra_repr() const {
  return str_cat(num_embeddings_, ", ", embedding_dim_,
                 padding_idx_ ? str_cat(", padding_idx=", *padding_idx_) : "");
}

}  // namespace tandem::nn
