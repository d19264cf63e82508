// The transformer's layers, as torch.nn's: TransformerEncoderLayer,
// TransformerEncoder, TransformerDecoderLayer, TransformerDecoder and
// Transformer.
//
//   nn::TransformerLayerOptions layer{.d_model = 64, .nhead = 4, .dim_feedforward = 256};
//   auto encoder = std::make_shared<nn::TransformerEncoder>(layer, /*num_layers=*/2);
//   Tensor y = (*encoder)(x);        // x [batch, seq, 64] -> [batch, seq, 64]
//   encoder->forward(x, {}, pad);    // with a key padding mask [batch, seq]
//
//   nn::Transformer seq2seq({.layer = layer});      // 6 + 6 layers, as torch's
//   Tensor out = seq2seq.forward(src, tgt);          // [batch, tgt_seq, 64]
//
// An encoder layer is self-attention then a feed-forward block (linear1,
// activation, dropout, linear2), each with dropout and a residual
// connection, and LayerNorm after each residual (post-norm, torch's default)
// or at the start of each block (norm_first, pre-norm):
//   post-norm: x = norm1(x + sa(x));        x = norm2(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x));        x = x + ff(norm2(x))
// A decoder layer has attention over the encoder's output ("memory")
// between the two, with norm3 and dropout3 for the third block.
// Children and parameters carry torch's names ("self_attn.in_proj_weight",
// "multihead_attn.out_proj.weight", "linear1.weight", "norm2.bias";
// "layers.0. ..." in a stack, "encoder." and "decoder." in a Transformer), so
// a torch state_dict with the same options loads as is.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "eager/nn/attention.h"
#include "eager/nn/dropout.h"
#include "eager/nn/linear.h"
#include "eager/nn/module.h"
#include "eager/nn/norm.h"
#include "eager/nn/sequential.h"
#include "eager/ops.h"

namespace tandem::nn {

// The feed-forward block's activation (torch::kReLU, torch::kGELU).
enum class TransformerActivation { kReLU, kGELU };

struct TransformerLayerOptions {
  int64_t d_model = 0;
  int64_t nhead = 1;  // Must divide d_model.
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  TransformerActivation activation = TransformerActivation::kReLU;
  double layer_norm_eps = 1e-5;
  // [batch, seq, d_model]; see MultiheadAttentionOptions::batch_first for
  // why this differs from torch's default.
  bool batch_first = true;
  bool norm_first = false;
  bool bias = true;  // Of the attention's projections and the linear layers (norms keep theirs).
  // forward(x) masks the future: position i attends to 0..i, as a language
  // model needs. (torch passes is_causal with a mask at each call; Tandem's
  // one-input forward, the one hybridize and export trace, takes it from
  // here.)
  bool causal = false;
  DType dtype = DType::kFloat32;
};

// The blocks every layer has, and the residual wiring of both norm
// placements.
class TransformerLayerBase : public Module {
 public:
  const TransformerLayerOptions& options() const { return options_; }
  std::string extra_repr() const override;

 protected:
  TransformerLayerBase(const TransformerLayerOptions& options, const char* type);
  // x + block(norm(x)) with norm_first, norm(x + block(x)) without.
  template <class Block>
  Tensor residual(const Tensor& x, LayerNorm& norm, Block&& block) {
    const std::source_location site = call_site();
    if (options_.norm_first) return add(x, block(norm(x, site)), site);
    return norm(add(x, block(x), site), site);
  }
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor feed_forward_block(const Tensor& x, Dropout& last_dropout);
  std::shared_ptr<MultiheadAttention> attention_module(const std::string& name);
  std::shared_ptr<LayerNorm> norm_module(const std::string& name);

  TransformerLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
  std::shared_ptr<Dropout> dropout1_, dropout2_;
};

// What TransformerEncoder and TransformerDecoder share: `num_layers` layers
// made from the same options (each with its own parameters), registered as
// the Sequential "layers" ("layers.0", ...), then, when `final_norm`, a
// LayerNorm "norm" (usual with norm_first layers).
template <class Layer>
class TransformerStack : public Module {
 public:
  const std::vector<std::shared_ptr<Layer>>& layers() const { return layers_; }
  std::string extra_repr() const override;

 protected:
  TransformerStack(const TransformerLayerOptions& layer, int64_t num_layers, bool final_norm,
                   const char* type);
  // `call_layer(layer, y)` for each layer in turn, then the final norm, as a
  // call of this module from `where`.
  template <class CallLayer>
  Tensor through_layers(const Tensor& x, std::source_location where, CallLayer&& call_layer) {
    CallScope call(*this, where);
    Tensor y = x;
    {
      CallScope in_stack(*stack_, where);
      for (const auto& layer : layers_) y = call_layer(*layer, y);
    }
    return final_norm(y);
  }
  Tensor final_norm(const Tensor& y) { return norm_ ? (*norm_)(y, call_site()) : y; }

  std::shared_ptr<Sequential> stack_;  // "layers": the layers_, in order.

 private:
  std::vector<std::shared_ptr<Layer>> layers_;
  std::shared_ptr<LayerNorm> norm_;  // Null without final_norm.
};

class TransformerEncoderLayer : public TransformerLayerBase {
 public:
  explicit TransformerEncoderLayer(const TransformerLayerOptions& options);

  // forward(x, {}, {}).
  Tensor forward(const Tensor& x) override;
  // With MultiheadAttention's masks (its conventions: true means "may not
  // attend" / "is padding"); options().causal applies as well.
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerEncoderLayer"; }

 private:
  Tensor encode(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
};

class TransformerEncoder : public TransformerStack<TransformerEncoderLayer> {
 public:
  TransformerEncoder(const TransformerLayerOptions& layer, int64_t num_layers,
                     bool final_norm = false)
      : TransformerStack(layer, num_layers, final_norm, "TransformerEncoder") {}

  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerEncoder"; }
};

// The masks of a decoder's call, with MultiheadAttention's conventions
// (true: "may not attend" / "is padding"). tgt_* apply to the decoder's
// self-attention (options().causal too), memory_* to its attention over the
// memory.
struct TransformerDecoderMasks {
  Tensor tgt_mask = {};
  Tensor memory_mask = {};
  Tensor tgt_key_padding_mask = {};
  Tensor memory_key_padding_mask = {};
};

class TransformerDecoderLayer : public TransformerLayerBase {
 public:
  explicit TransformerDecoderLayer(const TransformerLayerOptions& options);

  // tgt [batch, T, d_model] attending to itself and to memory [batch, S,
  // d_model] (batch_first); returns [batch, T, d_model].
  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {},
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerDecoderLayer"; }

 private:
  Tensor decode(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks);

  std::shared_ptr<MultiheadAttention> multihead_attn_;
  std::shared_ptr<LayerNorm> norm3_;
  std::shared_ptr<Dropout> dropout3_;
};

class TransformerDecoder : public TransformerStack<TransformerDecoderLayer> {
 public:
  TransformerDecoder(const TransformerLayerOptions& layer, int64_t num_layers,
                     bool final_norm = false)
      : TransformerStack(layer, num_layers, final_norm, "TransformerDecoder") {}

  Tensor forward(const Tensor& tgt, const Tensor& memory, const TransformerDecoderMasks& masks = {},
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerDecoder"; }
};

struct TransformerOptions {
  // Both stacks' layers; `causal` applies to the decoder's self-attention
  // only (a target position sees the targets before it), never to the
  // encoder.
  TransformerLayerOptions layer{.d_model = 512, .nhead = 8};
  int64_t num_encoder_layers = 6;
  int64_t num_decoder_layers = 6;
};

// An encoder and a decoder, each ending with a LayerNorm, as torch's
// nn.Transformer.
class Transformer : public Module {
 public:
  explicit Transformer(const TransformerOptions& options);

  // The decoder's output for `tgt` [batch, T, d_model] over the encoded
  // `src` [batch, S, d_model]. src_mask and src_key_padding_mask go to the
  // encoder; masks.memory_key_padding_mask is usually src_key_padding_mask.
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_mask = {},
                 const Tensor& src_key_padding_mask = {}, const TransformerDecoderMasks& masks = {},
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "Transformer"; }
  const std::shared_ptr<TransformerEncoder>& encoder() const { return encoder_; }
  const std::shared_ptr<TransformerDecoder>& decoder() const { return decoder_; }

 private:
  std::shared_ptr<TransformerEncoder> encoder_;
  std::shared_ptr<TransformerDecoder> decoder_;
};

}  // namespace tandem::nn
