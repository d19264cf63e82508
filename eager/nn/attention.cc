#include "eager/nn/attention.h"

#include <cmath>
#include <limits>
#include <memory>

#include "core/error.h"
#include "eager/composite_ops.h"
#include "eager/nn/init.h"
#include "eager/ops.h"
#include "kernels/attention.h"

namespace tandem::nn {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// The permutation that swaps the last two of `rank` axes.
Dims swap_last_two(int rank) {
  Dims perm;
  for (int axis = 0; axis < rank; ++axis) perm.push_back(axis);
  std::swap(perm[rank - 2], perm[rank - 1]);
  return perm;
}

// `scores` where `allowed` is true, -inf elsewhere.
Tensor keep_allowed(const Tensor& scores, const Tensor& allowed, std::source_location site) {
  return where(allowed, scores, full({}, -kInfinity, scores.dtype(), scores.device(), site), site);
}

// Whether `mask` suits the fused kernel for scores whose axes before [L, S]
// are `leading`: undefined, or needing no gradient (the kernel gives it
// none) and, with ones in front, 1 or the scores' size along each of them.
bool mask_fusable(const Tensor& mask, const Dims& leading) {
  if (!mask.defined()) return true;
  const int rank = static_cast<int>(leading.size()) + 2;
  if (mask.rank() > rank || (mask.dtype() != DType::kBool && mask.requires_grad())) return false;
  const int missing = rank - mask.rank();
  for (int axis = missing; axis + 2 < rank; ++axis) {
    const int64_t size = mask.shape()[axis - missing];
    if (size != 1 && size != leading[static_cast<size_t>(axis)]) return false;
  }
  return true;
}

bool floating(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }

// Whether the fused kernel (fused_attention) computes this call: query, key
// and value of one floating dtype and rank, sharing their leading axes, and
// a mask_fusable one. Other calls take the composition of ops.
bool fusable(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& mask) {
  const DType dtype = query.dtype();
  if (!floating(dtype) || key.dtype() != dtype || value.dtype() != dtype) return false;
  const int rank = query.rank();
  if (key.rank() != rank || value.rank() != rank ||
      rank - 2 > kernels::AttentionGeometry::kMaxLeadingAxes) {
    return false;
  }
  for (int axis = 0; axis + 2 < rank; ++axis) {
    if (key.shape()[axis] != query.shape()[axis] || value.shape()[axis] != query.shape()[axis]) {
      return false;
    }
  }
  return mask_fusable(mask, Dims(query.shape().begin(), query.shape().end() - 2));
}

// `mask` with axes of size 1 in front, up to `rank`.
Tensor with_rank(const Tensor& mask, int rank, std::source_location site) {
  if (mask.rank() == rank) return mask;
  Dims dims(static_cast<size_t>(rank - mask.rank()), 1);
  dims.insert(dims.end(), mask.shape().begin(), mask.shape().end());
  return reshape(mask, dims, site);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, std::source_location site) {
  const auto shapes = [&] {
    return str_cat("query ", query.shape().to_string(), ", key ", key.shape().to_string(),
                   " and value ", value.shape().to_string());
  };
  TANDEM_CHECK(query.rank() >= 2 && key.rank() >= 2 && value.rank() >= 2,
               "scaled_dot_product_attention: query, key and value need at least two axes "
               "([..., sequence, features]), got ",
               shapes());
  TANDEM_CHECK(query.shape().dim(-1) == key.shape().dim(-1),
               "scaled_dot_product_attention: query and key must have the same features (last "
               "axis), got ",
               shapes());
  TANDEM_CHECK(key.shape().dim(-2) == value.shape().dim(-2),
               "scaled_dot_product_attention: key and value must have the same sequence length "
               "(axis -2), got ",
               shapes());
  TANDEM_CHECK(dropout_p >= 0 && dropout_p < 1,
               "scaled_dot_product_attention: dropout_p must be in [0, 1), got ", dropout_p);
  const int64_t queries = query.shape().dim(-2), keys = key.shape().dim(-2);
  if (attn_mask.defined()) {
    const Shape& m = attn_mask.shape();
    const bool fits = m.rank() == 0 || ((m.dim(-1) == 1 || m.dim(-1) == keys) &&
                                        (m.rank() < 2 || m.dim(-2) == 1 || m.dim(-2) == queries));
    TANDEM_CHECK(fits, "scaled_dot_product_attention: attn_mask ", m.to_string(),
                 " does not broadcast to the scores [..., ", queries, ", ", keys, "] of ",
                 shapes());
    TANDEM_CHECK(attn_mask.dtype() == DType::kBool || attn_mask.dtype() == query.dtype(),
                 "scaled_dot_product_attention: attn_mask must be bool (true: may attend) or ",
                 dtype_name(query.dtype()), " (added to the scores), got ",
                 dtype_name(attn_mask.dtype()));
  }
  const double factor = scale.value_or(1 / std::sqrt(static_cast<double>(query.shape().dim(-1))));
  if (fusable(query, key, value, attn_mask)) {
    return fused_attention(
        query, key, value,
        attn_mask.defined() ? with_rank(attn_mask, query.rank(), site) : attn_mask, is_causal,
        factor, dropout_p, 0, site);
  }
  // Scaling the query costs L x E multiplications, the scores L x S.
  Tensor scores =
      matmul(mul(query, factor, site), transpose(key, swap_last_two(key.rank()), site), site);
  if (is_causal) {
    scores = keep_allowed(scores, tril_mask(queries, keys, 0, query.device(), site), site);
  }
  if (attn_mask.defined()) {
    scores = attn_mask.dtype() == DType::kBool ? keep_allowed(scores, attn_mask, site)
                                               : add(scores, attn_mask, site);
  }
  Tensor weights = softmax(scores, -1, site);
  if (dropout_p > 0) weights = dropout(weights, dropout_p, /*training=*/true, site);
  return matmul(weights, value, site);
}

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& options)
    : options_(options) {
  const int64_t e = options.embed_dim;
  TANDEM_CHECK(e > 0 && options.num_heads > 0 && e % options.num_heads == 0,
               "MultiheadAttention needs a positive embed_dim divisible by a positive num_heads, "
               "got embed_dim ",
               e, " and num_heads ", options.num_heads);
  TANDEM_CHECK(options.dropout >= 0 && options.dropout < 1,
               "MultiheadAttention: dropout must be in [0, 1), got ", options.dropout);
  in_proj_weight_ = register_parameter("in_proj_weight", Tensor::empty({3 * e, e}, options.dtype));
  init::xavier_uniform_(in_proj_weight_);
  if (options.bias) {
    in_proj_bias_ = register_parameter("in_proj_bias", zeros({3 * e}, options.dtype));
  } else {
    zero_bias_ = register_constant(zeros({3 * e}, options.dtype));
  }
  out_proj_ = register_module(
      "out_proj", std::make_shared<Linear>(LinearOptions{e, e, options.bias, options.dtype}));
  if (options.bias) init::zeros_(out_proj_->bias());
}

Tensor MultiheadAttention::forward(const Tensor& x) { return attend(x, x, x, {}, {}, false); }

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& attn_mask, const Tensor& key_padding_mask,
                                   bool is_causal, std::source_location where) {
  CallScope call(*this, where);
  return attend(query, key, value, attn_mask, key_padding_mask, is_causal);
}

Tensor MultiheadAttention::split_heads(const Tensor& x) const {
  const Shape& s = x.shape();
  const int64_t heads = options_.num_heads;
  return transpose(reshape(x, {s[0], s[1], heads, s[2] / heads}, call_site()), {0, 2, 1, 3},
                   call_site());
}

Tensor MultiheadAttention::merge_heads(const Tensor& x) const {
  const Shape& s = x.shape();  // [batch, heads, seq, head_dim]
  return reshape(transpose(x, {0, 2, 1, 3}, call_site()), {s[0], s[2], s[1] * s[3]}, call_site());
}

Tensor MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                  const Tensor& attn_mask, const Tensor& key_padding_mask,
                                  bool is_causal) {
  const std::source_location site = call_site();
  const int64_t e = options_.embed_dim, heads = options_.num_heads;
  const auto layout = options_.batch_first ? "[batch, seq, " : "[seq, batch, ";
  for (const Tensor* t : {&query, &key, &value}) {
    TANDEM_CHECK(t->rank() == 3 && t->shape().dim(-1) == e, "MultiheadAttention(embed_dim=", e,
                 ") expects query, key and value of shape ", layout, e, "], got ",
                 query.shape().to_string(), ", ", key.shape().to_string(), " and ",
                 value.shape().to_string());
  }
  // Batch first from here on.
  const auto batch_first = [&](const Tensor& t) {
    return options_.batch_first ? t : transpose(t, {1, 0, 2}, site);
  };
  Tensor q = batch_first(query), k = batch_first(key), v = batch_first(value);
  const int64_t batch = q.shape()[0], queries = q.shape()[1], keys = k.shape()[1];
  TANDEM_CHECK(k.shape()[0] == batch && v.shape()[0] == batch && v.shape()[1] == keys,
               "MultiheadAttention: query, key and value must share the batch, and key and "
               "value the sequence, got ",
               query.shape().to_string(), ", ", key.shape().to_string(), " and ",
               value.shape().to_string(), " (", layout, "embed])");

  const Tensor& bias = options_.bias ? in_proj_bias_ : zero_bias_;
  if (query.impl_ptr() == key.impl_ptr() && key.impl_ptr() == value.impl_ptr()) {
    // Self-attention: one product for the three projections.
    std::vector<Tensor> qkv = split(linear(q, in_proj_weight_, bias, site), {e, e, e}, -1, site);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    const auto project = [&](const Tensor& x, int64_t part) {
      return linear(x, slice(in_proj_weight_, 0, part * e, (part + 1) * e, 1, site),
                    slice(bias, 0, part * e, (part + 1) * e, 1, site), site);
    };
    q = project(q, 0), k = project(k, 1), v = project(v, 2);
  }

  // Both masks become one added to the scores, of shape [batch or 1, heads
  // or 1, L, S].
  const auto additive = [&](const Tensor& mask, const char* name) {
    if (mask.dtype() != DType::kBool) {
      TANDEM_CHECK(mask.dtype() == q.dtype(), "MultiheadAttention: ", name,
                   " must be bool (true: may not attend) or ", dtype_name(q.dtype()),
                   " (added to the scores), got ", dtype_name(mask.dtype()));
      return mask;
    }
    return where(mask, full({}, -kInfinity, q.dtype(), q.device(), site),
                 full({}, 0.0, q.dtype(), q.device(), site), site);
  };
  Tensor mask;
  if (attn_mask.defined()) {
    const Shape& m = attn_mask.shape();
    const bool two_d = m.rank() == 2 && m[0] == queries && m[1] == keys;
    const bool three_d = m.rank() == 3 && m[0] == batch * heads && m[1] == queries && m[2] == keys;
    TANDEM_CHECK(two_d || three_d, "MultiheadAttention: attn_mask must be [", queries, ", ", keys,
                 "] or [batch * num_heads = ", batch * heads, ", ", queries, ", ", keys, "], got ",
                 m.to_string());
    mask = additive(attn_mask, "attn_mask");
    if (three_d) mask = reshape(mask, {batch, heads, queries, keys}, site);
  }
  if (key_padding_mask.defined()) {
    const Shape& m = key_padding_mask.shape();
    TANDEM_CHECK(m.rank() == 2 && m[0] == batch && m[1] == keys,
                 "MultiheadAttention: key_padding_mask must be [batch, S] = [", batch, ", ", keys,
                 "], got ", m.to_string());
    Tensor padding =
        reshape(additive(key_padding_mask, "key_padding_mask"), {batch, 1, 1, keys}, site);
    mask = mask.defined() ? add(mask, padding, site) : padding;
  }
  const double dropout = is_training() ? options_.dropout : 0;
  Tensor merged;
  if (floating(q.dtype()) && mask_fusable(mask, {batch, heads})) {
    // The fused kernel reads the heads in place: [batch, seq, heads, head
    // dim] is a view of the projection, and its output one of [batch, seq,
    // embed_dim] (Note [Attention: one kernel, or a composition of ops]).
    const int64_t d = e / heads;
    Tensor y = fused_attention(
        reshape(q, {batch, queries, heads, d}, site), reshape(k, {batch, keys, heads, d}, site),
        reshape(v, {batch, keys, heads, d}, site), mask.defined() ? with_rank(mask, 4, site) : mask,
        is_causal, 1 / std::sqrt(static_cast<double>(d)), dropout, heads, site);
    merged = reshape(y, {batch, queries, e}, site);
  } else {
    merged = merge_heads(scaled_dot_product_attention(
        split_heads(q), split_heads(k), split_heads(v), mask, dropout, is_causal, {}, site));
  }
  Tensor out = (*out_proj_)(merged, site);
  return options_.batch_first ? out : transpose(out, {1, 0, 2}, site);
}

std::string MultiheadAttention::extra_repr() const {
  return str_cat("embed_dim=", options_.embed_dim, ", num_heads=", options_.num_heads,
                 ", dropout=", options_.dropout, ", bias=", options_.bias ? "true" : "false",
                 ", batch_first=", options_.batch_first ? "true" : "false");
}

}  // namespace tandem::nn
