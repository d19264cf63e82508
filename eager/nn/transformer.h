// nn::TransformerEncoderLayer and nn::TransformerEncoder, as torch.nn's.
//
//   nn::TransformerEncoderLayerOptions layer{.d_model = 64, .nhead = 4, .dim_feedforward = 256};
//   auto encoder = std::make_shared<nn::TransformerEncoder>(layer, /*num_layers=*/2);
//   Tensor y = (*encoder)(x);        // x [batch, seq, 64] -> [batch, seq, 64]
//   encoder->forward(x, {}, pad);    // with a key padding mask [batch, seq]
//
// A layer is self-attention then a feed-forward block (linear1, activation,
// dropout, linear2), each with dropout and a residual connection, and
// LayerNorm after each residual (post-norm, torch's default) or at the start
// of each block (norm_first, pre-norm):
//   post-norm: x = norm1(x + sa(x));        x = norm2(x + ff(x))
//   pre-norm:  x = x + sa(norm1(x));        x = x + ff(norm2(x))
// Children and parameters carry torch's names ("self_attn.in_proj_weight",
// "linear1.weight", "norm2.bias"; "layers.0. ..." in an encoder), so a torch
// state_dict with the same options loads as is.
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

namespace tandem::nn {

// The feed-forward block's activation (torch::kReLU, torch::kGELU).
enum class TransformerActivation { kReLU, kGELU };

struct TransformerEncoderLayerOptions {
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

class TransformerEncoderLayer : public Module {
 public:
  explicit TransformerEncoderLayer(const TransformerEncoderLayerOptions& options);

  // forward(x, {}, {}).
  Tensor forward(const Tensor& x) override;
  // With MultiheadAttention's masks (its conventions: true means "may not
  // attend" / "is padding"); options().causal applies as well.
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerEncoderLayer"; }
  std::string extra_repr() const override;
  const TransformerEncoderLayerOptions& options() const { return options_; }

 private:
  Tensor encode(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor self_attention_block(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask);
  Tensor feed_forward_block(const Tensor& x);

  TransformerEncoderLayerOptions options_;
  std::shared_ptr<MultiheadAttention> self_attn_;
  std::shared_ptr<Linear> linear1_, linear2_;
  std::shared_ptr<Dropout> dropout_, dropout1_, dropout2_;
  std::shared_ptr<LayerNorm> norm1_, norm2_;
};

// `num_layers` layers made from the same options (each with its own
// parameters), then, when `final_norm`, a LayerNorm "norm" (usual with
// norm_first layers).
class TransformerEncoder : public Module {
 public:
  TransformerEncoder(const TransformerEncoderLayerOptions& layer, int64_t num_layers,
                     bool final_norm = false);

  Tensor forward(const Tensor& x) override;
  Tensor forward(const Tensor& x, const Tensor& mask, const Tensor& key_padding_mask,
                 std::source_location where = std::source_location::current());

  std::string type_name() const override { return "TransformerEncoder"; }
  std::string extra_repr() const override;
  const std::vector<std::shared_ptr<TransformerEncoderLayer>>& layers() const { return layers_; }

 private:
  std::shared_ptr<Sequential> stack_;  // "layers": the layers_, in order.
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers_;
  std::shared_ptr<LayerNorm> norm_;  // Null without final_norm.
};

}  // namespace tandem::nn
