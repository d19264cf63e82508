#include "eager/nn/transformer.h"

#include <utility>

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerEncoderLayerOptions& options)
    : options_(options) {
  TANDEM_CHECK(options.d_model > 0 && options.dim_feedforward > 0,
               "TransformerEncoderLayer needs positive d_model and dim_feedforward, got ",
               options.d_model, " and ", options.dim_feedforward);
  const int64_t d = options.d_model;
  self_attn_ =
      register_module("self_attn", std::make_shared<MultiheadAttention>(
                                       MultiheadAttentionOptions{.embed_dim = d,
                                                                 .num_heads = options.nhead,
                                                                 .dropout = options.dropout,
                                                                 .bias = options.bias,
                                                                 .batch_first = options.batch_first,
                                                                 .dtype = options.dtype}));
  linear1_ =
      register_module("linear1", std::make_shared<Linear>(LinearOptions{
                                     d, options.dim_feedforward, options.bias, options.dtype}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2_ =
      register_module("linear2", std::make_shared<Linear>(LinearOptions{
                                     options.dim_feedforward, d, options.bias, options.dtype}));
  const LayerNormOptions norm{.normalized_shape = {d},
                              .eps = options.layer_norm_eps,
                              .elementwise_affine = true,
                              .dtype = options.dtype};
  norm1_ = register_module("norm1", std::make_shared<LayerNorm>(norm));
  norm2_ = register_module("norm2", std::make_shared<LayerNorm>(norm));
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x) { return encode(x, {}, {}); }

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask,
                                        const Tensor& key_padding_mask,
                                        std::source_location where) {
  CallScope call(*this, where);
  return encode(x, mask, key_padding_mask);
}

Tensor TransformerEncoderLayer::encode(const Tensor& x, const Tensor& mask,
                                       const Tensor& key_padding_mask) {
  const std::source_location site = call_site();
  if (options_.norm_first) {
    Tensor h = add(x, self_attention_block((*norm1_)(x, site), mask, key_padding_mask), site);
    return add(h, feed_forward_block((*norm2_)(h, site)), site);
  }
  Tensor h = (*norm1_)(add(x, self_attention_block(x, mask, key_padding_mask), site), site);
  return (*norm2_)(add(h, feed_forward_block(h), site), site);
}

Tensor TransformerEncoderLayer::self_attention_block(const Tensor& x, const Tensor& mask,
                                                     const Tensor& key_padding_mask) {
  const std::source_location site = call_site();
  return (*dropout1_)(self_attn_->forward(x, x, x, mask, key_padding_mask, options_.causal, site),
                      site);
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  const std::source_location site = call_site();
  Tensor h = (*linear1_)(x, site);
  h = options_.activation == TransformerActivation::kGELU ? gelu(h, site) : relu(h, site);
  return (*dropout2_)((*linear2_)((*dropout_)(h, site), site), site);
}

std::string TransformerEncoderLayer::extra_repr() const {
  const TransformerEncoderLayerOptions& o = options_;
  return str_cat("d_model=", o.d_model, ", nhead=", o.nhead,
                 ", dim_feedforward=", o.dim_feedforward, ", dropout=", o.dropout,
                 ", activation=", o.activation == TransformerActivation::kGELU ? "gelu" : "relu",
                 ", norm_first=", o.norm_first ? "true" : "false",
                 ", causal=", o.causal ? "true" : "false");
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayerOptions& layer,
                                       int64_t num_layers, bool final_norm) {
  TANDEM_CHECK(num_layers > 0, "TransformerEncoder needs num_layers > 0, got ", num_layers);
  auto stack = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers_.push_back(std::make_shared<TransformerEncoderLayer>(layer));
    stack->push_back(layers_.back());
  }
  stack_ = std::move(stack);
  if (final_norm) {
    norm_ = register_module(
        "norm", std::make_shared<LayerNorm>(LayerNormOptions{.normalized_shape = {layer.d_model},
                                                             .eps = layer.layer_norm_eps,
                                                             .elementwise_affine = true,
                                                             .dtype = layer.dtype}));
  }
}

Tensor TransformerEncoder::forward(const Tensor& x) {
  Tensor y = (*stack_)(x, call_site());
  return norm_ ? (*norm_)(y, call_site()) : y;
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& mask,
                                   const Tensor& key_padding_mask, std::source_location where) {
  CallScope call(*this, where);
  Tensor y = x;
  {
    CallScope in_stack(*stack_, where);
    for (const auto& layer : layers_) y = layer->forward(y, mask, key_padding_mask, where);
  }
  return norm_ ? (*norm_)(y, call_site()) : y;
}

std::string TransformerEncoder::extra_repr() const {
  return str_cat("num_layers=", layers_.size(), ", final_norm=", norm_ ? "true" : "false");
}

}  // namespace tandem::nn
