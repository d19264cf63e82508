// Random models for the differential tests (tests/difftest/README.md).
//
//   ModelSpec spec = random_model(/*seed=*/42);
//   BuiltModel built = build(spec);          // the nn modules, weights from spec.seed
//   std::cout << built.code;                 // the same model as C++ a user would write
//   Tensor y = built.model->forward(model_input(spec, spec.batch, /*seed=*/1));
//
// A ModelSpec describes a model without its sizes where they follow from the
// input: a layer stores what it adds (a Linear's out_features, a Conv2d's
// out_channels, kernel, stride, ...) and takes its in_features, channels or
// normalized shape from the shape that reaches it when built. So removing a
// layer from a spec (shrinking a failure) leaves a spec that usually still
// builds; one that no longer fits its input (a pooling window larger than
// the image) is refused by build() with a tandem::Error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/tensor.h"
#include "eager/nn/sequential.h"

namespace tandem::difftest {

enum class LayerKind {
  kLinear,
  kConv2d,
  kBatchNorm,  // BatchNorm2d on rank 4, BatchNorm1d on ranks 2 and 3.
  kLayerNorm,
  kReLU,
  kLeakyReLU,
  kGELU,
  kSigmoid,
  kTanh,
  kActivation,  // One of the other activation modules, named by LayerSpec::activation.
  kDropout,
  kMaxPool2d,
  kAvgPool2d,
  kAdaptiveAvgPool2d,
  kFlatten,
  kEmbedding,  // Only as a model's first layer, on int64 token input.
  kSequential,
  kResidual,                 // x + body(x), the body a Sequential of shape-keeping layers.
  kTransformerEncoderLayer,  // On [N, seq, features]; heads divide the features.
  kRecurrent,                // RNN, LSTM or GRU (LayerSpec::activation) on [N, seq, features].
  kConv1d,                   // On [N, C, L].
  kConvTranspose2d,          // On [N, C, H, W].
  kUpsample,                 // On [N, C, L] or [N, C, H, W].
  kConvTranspose1d,          // On [N, C, L].
  kPositionalEncoding,       // On [N, seq, features]; LayerSpec::axes is max_len.
  kConv3d,                   // On [N, C, D, H, W].
};

struct LayerSpec {
  LayerKind kind = LayerKind::kReLU;
  // Linear: out_features; Conv2d, Conv1d: out_channels; Embedding: embedding_dim;
  // TransformerEncoderLayer: dim_feedforward; Recurrent: hidden_size.
  int64_t out = 0;
  // Convs and pooling (dilation: not AvgPool2d's).
  int64_t kernel = 1, stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;  // Linear, Conv2d, Conv1d, TransformerEncoderLayer.
  // LeakyReLU: negative slope; Dropout, TransformerEncoderLayer and Recurrent: p;
  // Activation: its parameter (ELU's and CELU's alpha, Softplus's beta), if it
  // takes one.
  double value = 0;
  // Activation: the module's type name ("SiLU"); TransformerEncoderLayer:
  // "relu" or "gelu"; Recurrent: "RNN", "RNN_relu", "LSTM" or "GRU".
  std::string activation;
  int64_t heads = 1;                        // TransformerEncoderLayer.
  bool norm_first = false, causal = false;  // TransformerEncoderLayer.
  int64_t num_layers = 1;                   // Recurrent.
  bool bidirectional = false;               // Recurrent.
  // LayerNorm: how many trailing axes it normalizes; AdaptiveAvgPool2d: the
  // output size; Flatten: the first axis flattened; ConvTranspose1d/2d: its
  // output_padding.
  int64_t axes = 1;
  // Upsample: the scale factor (value), mode (activation: "nearest" or
  // "linear") and align_corners (causal).
  std::vector<LayerSpec> children;  // Sequential, Residual.
};

struct ModelSpec {
  uint64_t seed = 0;  // Weights, inputs and every random draw of the checks.
  // The input's shape without the batch: {features}, {channels, length},
  // {channels, height, width}, or {length} of int64 tokens.
  std::vector<int64_t> input;
  bool tokens = false;  // int64 indices in [0, vocab); the first layer is an Embedding.
  int64_t vocab = 0;
  int64_t batch = 2;        // The batch the models are traced at.
  int64_t other_batch = 3;  // Another batch size, for replay and loaded models.
  std::vector<LayerSpec> layers;
};

// A spec drawn from `seed`: 1 to 8 layers, nested Sequentials and residual
// blocks, every nn module, small sizes (runs in milliseconds).
ModelSpec random_model(uint64_t seed);

struct BuiltModel {
  std::shared_ptr<nn::Sequential> model;
  DType dtype = DType::kFloat32;  // Of its parameters and float inputs.
  Shape output;                   // At spec.batch.
  std::string code;               // The model as C++, with the spec's seed and shapes.
  bool has_dropout = false;
  bool has_batch_norm = false;
};

// The modules of `spec`, with weights drawn from spec.seed (the same spec
// gives the same weights every time), in training mode. Throws tandem::Error
// when a layer does not fit the shape that reaches it. With `dtype` float64,
// the same model in float64: its parameters and buffers are the float32
// model's, converted, so it computes what the float32 model would without
// rounding (the checks' reference for how exact an answer can be). A
// non-zero `jitter` seeds a nudge of about a float32 ulp after every layer
// (Note [Jitter] in model_spec.cc): another rounding path through the same
// model, which shows how far rounding alone moves its answers. Layers keep
// their names.
BuiltModel build(const ModelSpec& spec, DType dtype = DType::kFloat32, uint64_t jitter = 0);

// An input of `batch` rows: normal floats, or tokens in [0, vocab).
Tensor model_input(const ModelSpec& spec, int64_t batch, uint64_t seed);

// Specs with one thing fewer (a layer removed, or a block replaced by its
// body), for shrinking a failure to its smallest form.
std::vector<ModelSpec> smaller_specs(const ModelSpec& spec);

// Layers in the spec, blocks and their bodies counted.
int count_layers(const ModelSpec& spec);

}  // namespace tandem::difftest
