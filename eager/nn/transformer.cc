#include "eager/nn/transformer.h"

#include <utility>

#include "core/error.h"
#include "eager/ops.h"

namespace tandem::nn {
namespace {

LayerNormOptions norm_options(const TransformerLayerOptions& o) {
  return {.normalized_shape = {o.d_model},
          .eps = o.layer_norm_eps,
          .elementwise_affine = true,
          .dtype = o.dtype};
}

}  // namespace

TransformerLayerBase::TransformerLayerBase(const TransformerLayerOptions& options, const char* type)
    : options_(options) {
  TANDEM_CHECK(options.d_model > 0 && options.dim_feedforward > 0, type,
               " needs positive d_model and dim_feedforward, got ", options.d_model, " and ",
               options.dim_feedforward);
  const int64_t d = options.d_model;
  self_attn_ = attention_module("self_attn");
  linear1_ =
      register_module("linear1", std::make_shared<Linear>(LinearOptions{
                                     d, options.dim_feedforward, options.bias, options.dtype}));
  dropout_ = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2_ =
      register_module("linear2", std::make_shared<Linear>(LinearOptions{
                                     options.dim_feedforward, d, options.bias, options.dtype}));
  norm1_ = norm_module("norm1");
  norm2_ = norm_module("norm2");
  dropout1_ = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2_ = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

std::shared_ptr<MultiheadAttention> TransformerLayerBase::attention_module(
    const std::string& name) {
  const TransformerLayerOptions& o = options_;
  return register_module(name, std::make_shared<MultiheadAttention>(
                                   MultiheadAttentionOptions{.embed_dim = o.d_model,
                                                             .num_heads = o.nhead,
                                                             .dropout = o.dropout,
                                                             .bias = o.bias,
                                                             .batch_first = o.batch_first,
                                                             .dtype = o.dtype}));
}

std::shared_ptr<LayerNorm> TransformerLayerBase::norm_module(const std::string& name) {
  return register_module(name, std::make_shared<LayerNorm>(norm_options(options_)));
}

Tensor TransformerLayerBase::self_attention_block(const Tensor& x, const Tensor& mask,
                                                  const Tensor& key_padding_mask) {
  const std::source_location site = call_site();
  return (*dropout1_)(self_attn_->forward(x, x, x, mask, key_padding_mask, options_.causal, site),
                      site);
}

Tensor TransformerLayerBase::feed_forward_block(const Tensor& x, Dropout& last_dropout) {
  const std::source_location site = call_site();
  Tensor h = (*linear1_)(x, site);
  h = options_.activation == TransformerActivation::kGELU ? gelu(h, site) : relu(h, site);
  return last_dropout((*linear2_)((*dropout_)(h, site), site), site);
}

std::string TransformerLayerBase::extra_repr() const {
  const TransformerLayerOptions& o = options_;
  return str_cat("d_model=", o.d_model, ", nhead=", o.nhead,
                 ", dim_feedforward=", o.dim_feedforward, ", dropout=", o.dropout,
                 ", activation=", o.activation == TransformerActivation::kGELU ? "gelu" : "relu",
                 ", norm_first=", o.norm_first ? "true" : "false",
                 ", causal=", o.causal ? "true" : "false");
}

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& options)
    : TransformerLayerBase(options, "TransformerEncoderLayer") {}

Tensor TransformerEncoderLayer::forward(const Tensor& x) { return encode(x, {}, {}); }

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask,
                                        const Tensor& key_padding_mask,
                                        std::source_location where) {
  CallScope call(*this, where);
  return encode(x, mask, key_padding_mask);
}

Tensor TransformerEncoderLayer::encode(const Tensor& x, const Tensor& mask,
                                       const Tensor& key_padding_mask) {
  Tensor h = residual(x, *norm1_, [&](const Tensor& in) {
    return self_attention_block(in, mask, key_padding_mask);
  });
  return residual(h, *norm2_, [&](const Tensor& in) { return feed_forward_block(in, *dropout2_); });
}

template <class Layer>
TransformerStack<Layer>::TransformerStack(const TransformerLayerOptions& layer, int64_t num_layers,
                                          bool final_norm, const char* type) {
  TANDEM_CHECK(num_layers > 0, type, " needs num_layers > 0, got ", num_layers);
  stack_ = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < num_layers; ++i) {
    layers_.push_back(std::make_shared<Layer>(layer));
    stack_->push_back(layers_.back());
  }
  if (final_norm) norm_ = register_module("norm", std::make_shared<LayerNorm>(norm_options(layer)));
}

template <class Layer>
std::string TransformerStack<Layer>::extra_repr() const {
  return str_cat("num_layers=", layers_.size(), ", final_norm=", norm_ ? "true" : "false");
}

template class TransformerStack<TransformerEncoderLayer>;
template class TransformerStack<TransformerDecoderLayer>;

Tensor TransformerEncoder::forward(const Tensor& x) {
  return final_norm((*stack_)(x, call_site()));
}

Tensor TransformerEncoder::forward(const Tensor& x, const Tensor& mask,
                                   const Tensor& key_padding_mask, std::source_location where) {
  return through_layers(x, where, [&](TransformerEncoderLayer& layer, const Tensor& y) {
    return layer.forward(y, mask, key_padding_mask, where);
  });
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& options)
    : TransformerLayerBase(options, "TransformerDecoderLayer") {
  multihead_attn_ = attention_module("multihead_attn");
  norm3_ = norm_module("norm3");
  dropout3_ = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory,
                                        const TransformerDecoderMasks& masks,
                                        std::source_location where) {
  CallScope call(*this, where);
  return decode(tgt, memory, masks);
}

Tensor TransformerDecoderLayer::decode(const Tensor& tgt, const Tensor& memory,
                                       const TransformerDecoderMasks& masks) {
  const std::source_location site = call_site();
  Tensor h = residual(tgt, *norm1_, [&](const Tensor& in) {
    return self_attention_block(in, masks.tgt_mask, masks.tgt_key_padding_mask);
  });
  h = residual(h, *norm2_, [&](const Tensor& in) {
    return (*dropout2_)(multihead_attn_->forward(in, memory, memory, masks.memory_mask,
                                                 masks.memory_key_padding_mask, false, site),
                        site);
  });
  return residual(h, *norm3_, [&](const Tensor& in) { return feed_forward_block(in, *dropout3_); });
}

Tensor TransformerDecoder::forward(const Tensor& tgt, const Tensor& memory,
                                   const TransformerDecoderMasks& masks,
                                   std::source_location where) {
  return through_layers(tgt, where, [&](TransformerDecoderLayer& layer, const Tensor& y) {
    return layer.forward(y, memory, masks, where);
  });
}

Transformer::Transformer(const TransformerOptions& options) {
  TransformerLayerOptions encoder_layer = options.layer;
  encoder_layer.causal = false;
  encoder_ = register_module("encoder", std::make_shared<TransformerEncoder>(
                                            encoder_layer, options.num_encoder_layers, true));
  decoder_ = register_module("decoder", std::make_shared<TransformerDecoder>(
                                            options.layer, options.num_decoder_layers, true));
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask,
                            const Tensor& src_key_padding_mask,
                            const TransformerDecoderMasks& masks, std::source_location where) {
  CallScope call(*this, where);
  Tensor memory = encoder_->forward(src, src_mask, src_key_padding_mask, where);
  return decoder_->forward(tgt, memory, masks, where);
}

}  // namespace tandem::nn
