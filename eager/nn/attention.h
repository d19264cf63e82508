// Attention: scaled_dot_product_attention, as
// torch.nn.functional.scaled_dot_product_attention, and nn::MultiheadAttention,
// as torch.nn.MultiheadAttention.
//
//   // q [batch, heads, L, E], k [batch, heads, S, E], v [batch, heads, S, Ev]
//   Tensor y = nn::scaled_dot_product_attention(q, k, v, {}, 0, /*is_causal=*/true);
//
//   auto attn = std::make_shared<nn::MultiheadAttention>(64, 4);   // embed_dim, heads
//   Tensor out = (*attn)(x);                          // self-attention, x [batch, L, 64]
//   Tensor cross = attn->forward(x, memory, memory);  // query, key, value
//
// Note [Attention: one kernel, or a composition of ops]
// scaled_dot_product_attention is one registry op, with a blocked kernel
// that holds the weights of a block of queries at a time and keeps none for
// the backward, which recomputes them (Note [Fused attention] in
// kernels/attention.h): at [8, 8, 512, 64] its forward and backward keep 84
// MiB where the [8, 8, 512, 512] weights alone are 64. It takes query, key
// and value of one floating dtype and rank that share their leading axes,
// and a mask that broadcasts along them and needs no gradient. Other calls
// (leading axes that broadcast as in matmul, a float mask that requires a
// gradient, such as a learned bias) are computed with the eager ops
// (matmul, softmax, where, dropout), which keep the weights for the
// backward. Both give torch's answer; dropout draws different masks on the
// two paths. MultiheadAttention hands the kernel its projections with the
// heads split off by a view ([batch, seq, heads, head_dim]) and takes its
// output as [batch, seq, embed_dim], so the head transposes (5-6% of
// tutorial 05's training step) and their backward copies are gone.
#pragma once

#include <cstdint>
#include <optional>
#include <source_location>

#include "core/dtype.h"
#include "eager/nn/linear.h"
#include "eager/nn/module.h"

namespace tandem::nn {

// softmax(q k^T * scale + mask) v over the last two axes; the leading axes
// broadcast as in matmul. query [..., L, E], key [..., S, E], value
// [..., S, Ev] give [..., L, Ev].
//  * attn_mask (optional), broadcastable to [..., L, S]: bool, where true
//    means "may attend" (torch's convention for this function), or a
//    floating mask of the query's dtype that is added to the scores.
//  * is_causal: query i attends to keys 0..i only (top-left aligned, as
//    torch); combines with attn_mask.
//  * dropout_p: dropout on the attention weights, applied whenever p > 0
//    (call it with 0 in evaluation, as torch's modules do).
//  * scale: 1 / sqrt(E) when not given.
// A query row that may attend to no key gets NaN, as in torch.
// Throws tandem::Error naming the shapes when they do not fit.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0,
                                    bool is_causal = false, std::optional<double> scale = {},
                                    std::source_location where = std::source_location::current());

struct MultiheadAttentionOptions {
  int64_t embed_dim = 0;
  int64_t num_heads = 1;  // Must divide embed_dim.
  double dropout = 0;     // On the attention weights, in training mode.
  bool bias = true;       // Of the input and output projections.
  // Inputs and output [batch, seq, embed_dim]. Unlike torch's default
  // (false: [seq, batch, embed_dim]), true, because an exported graph leaves
  // dimension 0 free (export_model): with batch_first the batch is that one.
  bool batch_first = true;
  DType dtype = DType::kFloat32;
};

// Parameters, with torch's names, shapes and initialization:
// "in_proj_weight" [3 * embed_dim, embed_dim] (xavier_uniform_; rows are the
// query, key and value projections), "in_proj_bias" [3 * embed_dim] (zeros),
// "out_proj.weight" and "out_proj.bias" (a Linear, its bias zeroed). A torch
// state_dict of a module with the same options loads as is.
class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(
            MultiheadAttentionOptions{.embed_dim = embed_dim, .num_heads = num_heads}) {}

  // Self-attention of x, without masks: forward(x, x, x).
  Tensor forward(const Tensor& x) override;

  // Attention of `query` [batch, L, E] over `key` and `value` [batch, S, E]
  // (batch_first), with torch's mask conventions for this module:
  //  * attn_mask [L, S] or [batch * num_heads, L, S]: bool, where true means
  //    "may NOT attend" (the opposite of scaled_dot_product_attention's), or
  //    floating, added to the scores;
  //  * key_padding_mask [batch, S]: bool, true marks padding keys to ignore;
  //  * is_causal: a causal mask besides the others.
  // The attention weights are not returned (torch's need_weights=false).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& attn_mask = {}, const Tensor& key_padding_mask = {},
                 bool is_causal = false,
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "MultiheadAttention"; }
  std::string extra_repr() const override;

  const MultiheadAttentionOptions& options() const { return options_; }
  const Tensor& in_proj_weight() const { return in_proj_weight_; }
  // Undefined when options().bias is false.
  const Tensor& in_proj_bias() const { return in_proj_bias_; }
  const std::shared_ptr<Linear>& out_proj() const { return out_proj_; }

 private:
  // The computation behind both forwards; the caller has opened the scope.
  Tensor attend(const Tensor& query, const Tensor& key, const Tensor& value,
                const Tensor& attn_mask, const Tensor& key_padding_mask, bool is_causal);
  // [batch, seq, embed_dim] -> [batch, heads, seq, head_dim], and back.
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;

  MultiheadAttentionOptions options_;
  Tensor in_proj_weight_;
  Tensor in_proj_bias_;
  Tensor zero_bias_;  // Stands in for in_proj_bias_ when there is none; not a parameter.
  std::shared_ptr<Linear> out_proj_;
};

}  // namespace tandem::nn
