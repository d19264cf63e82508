#include "tests/difftest/model_spec.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "eager/autograd.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "kernels/dispatch.h"

namespace tandem::difftest {
namespace {

// Draws from one seed with SplitMix64, so a seed names the same model with
// every compiler and standard library.
class Draw {
 public:
  explicit Draw(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [low, high].
  int64_t in(int64_t low, int64_t high) {
    return low + static_cast<int64_t>(next() % static_cast<uint64_t>(high - low + 1));
  }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
  template <class T>
  T one_of(std::initializer_list<T> options) {
    return options.begin()[in(0, static_cast<int64_t>(options.size()) - 1)];
  }

 private:
  uint64_t state_;
};

// x + body(x).
class Residual : public nn::Module {
 public:
  explicit Residual(std::shared_ptr<nn::Sequential> body)
      : body_(register_module("body", std::move(body))) {}
  Tensor forward(const Tensor& x) override { return add(x, body_->forward(x)); }
  std::string type_name() const override { return "Residual"; }

 private:
  std::shared_ptr<nn::Sequential> body_;
};

// Note [Jitter]
// y = x * (1 + u 2^-23), u uniform in [-1, 1) per element and call: on a
// float32 model, a nudge of about one ulp to every layer's output, so that
// the rest of the model runs down another rounding path, as fused or
// reordered arithmetic would. A few jittered runs show how far rounding
// alone moves this model's answers (the checks' yardstick, Note [Judging an
// answer] in checks.cc). Its draws have seeds of their own, so the global
// generator, and with it dropout's masks, is left as the other models have
// it.
class Jitter : public nn::Module {
 public:
  explicit Jitter(uint64_t seed) : seed_(seed) {}
  Tensor forward(const Tensor& x) override {
    const Dims dims(x.shape().begin(), x.shape().end());
    Tensor u = kernels::call1(
        "rand", {},
        {{"shape", dims},
         {"dtype", x.dtype()},
         {"seed", static_cast<int64_t>((seed_ + 0x9e3779b97f4a7c15ULL * calls_++) >> 1)}});
    return mul(x, add(mul(sub(mul(u, 2.0), 1.0), 0x1p-23), 1.0));
  }
  std::string type_name() const override { return "Jitter"; }

 private:
  uint64_t seed_;
  uint64_t calls_ = 0;
};

// What building one model carries along.
struct Context {
  DType dtype;
  uint64_t jitter;  // 0: none; else Note [Jitter] after every layer, seeded from it.
  BuiltModel& model;
  uint64_t jitters = 0;  // Made so far.
};

// Appends `layer` to `sequential` as entry `index` (its usual name), and a
// Jitter after it when the model is jittered, under a name of its own so that
// the layers' names stay those of the model without.
void append(nn::Sequential& sequential, size_t index, std::shared_ptr<nn::Module> layer,
            Context& context) {
  sequential.push_back(std::to_string(index), std::move(layer));
  if (context.jitter == 0) return;
  const uint64_t seed = context.jitter * 0x9e3779b97f4a7c15ULL + (context.jitters++ << 20);
  sequential.push_back(str_cat("jitter", index), std::make_shared<Jitter>(seed));
}

std::string shape_text(const Shape& shape) { return shape.to_string(); }

// The activation modules a kActivation layer draws from, beside the ones
// with a LayerKind of their own.
constexpr const char* kActivations[] = {"ELU",      "SELU",     "CELU",        "SiLU",     "Mish",
                                        "Softplus", "Softsign", "Hardsigmoid", "Hardswish"};

// A kActivation layer's module and the code that makes it.
std::pair<std::shared_ptr<nn::Module>, std::string> activation_module(const LayerSpec& spec) {
  const std::string& name = spec.activation;
  if (name == "ELU")
    return {std::make_shared<nn::ELU>(spec.value), str_cat("nn::ELU(", spec.value, ")")};
  if (name == "CELU")
    return {std::make_shared<nn::CELU>(spec.value), str_cat("nn::CELU(", spec.value, ")")};
  if (name == "Softplus") {
    return {std::make_shared<nn::Softplus>(spec.value), str_cat("nn::Softplus(", spec.value, ")")};
  }
  if (name == "SELU") return {std::make_shared<nn::SELU>(), "nn::SELU()"};
  if (name == "SiLU") return {std::make_shared<nn::SiLU>(), "nn::SiLU()"};
  if (name == "Mish") return {std::make_shared<nn::Mish>(), "nn::Mish()"};
  if (name == "Softsign") return {std::make_shared<nn::Softsign>(), "nn::Softsign()"};
  if (name == "Hardsigmoid") return {std::make_shared<nn::Hardsigmoid>(), "nn::Hardsigmoid()"};
  TANDEM_CHECK(name == "Hardswish", "unknown activation module '", name, "'");
  return {std::make_shared<nn::Hardswish>(), "nn::Hardswish()"};
}

std::string dims_text(absl::Span<const int64_t> dims) {
  std::string text = "{";
  for (size_t i = 0; i < dims.size(); ++i) text += str_cat(i ? ", " : "", dims[i]);
  return text + "}";
}

// Norm layers start as the identity (ones, zeros, unit variance), which
// would hide a wrong fold or a lost statistic: give them values a trained
// model could have.
void randomize_norm(const Tensor& weight, const Tensor& bias) {
  NoGradGuard no_grad;
  if (weight.defined()) {
    weight.assign_(add(
        mul(randn(Dims(weight.shape().begin(), weight.shape().end()), weight.dtype()), 0.5), 1.0));
  }
  if (bias.defined()) {
    bias.assign_(mul(randn(Dims(bias.shape().begin(), bias.shape().end()), bias.dtype()), 0.3));
  }
}

struct Layer {
  std::shared_ptr<nn::Module> module;
  Shape output;
  std::string code;  // One expression, lines after the first indented by `indent`.
};

Layer build_layer(const LayerSpec& spec, const Shape& in, int indent, Context& context);

// The children of a block in order, as a Sequential.
Layer build_sequence(const std::vector<LayerSpec>& specs, const Shape& in, int indent,
                     Context& context) {
  auto sequential = std::make_shared<nn::Sequential>();
  Shape shape = in;
  const std::string pad(static_cast<size_t>(indent + 4), ' ');
  std::string code = "nn::Sequential(";
  for (size_t i = 0; i < specs.size(); ++i) {
    Layer child = build_layer(specs[i], shape, indent + 4, context);
    append(*sequential, i, child.module, context);
    shape = child.output;
    code += str_cat("\n", pad, child.code, i + 1 < specs.size() ? "," : "", "  // -> ",
                    shape_text(shape));
  }
  code += str_cat("\n", std::string(static_cast<size_t>(indent), ' '), ")");
  return {sequential, shape, code};
}

Layer build_layer(const LayerSpec& spec, const Shape& in, int indent, Context& context) {
  const DType dtype = context.dtype;
  BuiltModel& model = context.model;
  const int rank = in.rank();
  const int64_t last = rank > 0 ? in[rank - 1] : 0;
  const int64_t channels = rank > 1 ? in[1] : 0;
  std::shared_ptr<nn::Module> module;
  std::string code;
  switch (spec.kind) {
    case LayerKind::kLinear:
      TANDEM_CHECK(rank >= 2, "Linear needs a batch of vectors");
      module = std::make_shared<nn::Linear>(nn::LinearOptions{last, spec.out, spec.bias, dtype});
      code = str_cat("nn::Linear(", last, ", ", spec.out, spec.bias ? "" : ", /*bias=*/false", ")");
      break;
    case LayerKind::kConv2d:
    case LayerKind::kConv1d: {
      const bool one_d = spec.kind == LayerKind::kConv1d;
      TANDEM_CHECK(rank == (one_d ? 3 : 4),
                   one_d ? "Conv1d needs [N, C, L]" : "Conv2d needs [N, C, H, W]");
      const int64_t groups =
          channels % spec.groups == 0 && spec.out % spec.groups == 0 ? spec.groups : 1;
      if (one_d) {
        module = std::make_shared<nn::Conv1d>(
            nn::Conv1dOptions{channels, spec.out, spec.kernel, spec.stride, spec.padding,
                              spec.dilation, groups, spec.bias, dtype});
      } else {
        module = std::make_shared<nn::Conv2d>(
            nn::Conv2dOptions{channels, spec.out, spec.kernel, spec.stride, spec.padding,
                              spec.dilation, groups, spec.bias, dtype});
      }
      code = str_cat(one_d ? "nn::Conv1d(" : "nn::Conv2d(", channels, ", ", spec.out, ", ",
                     spec.kernel, ", /*stride=*/", spec.stride, ", /*padding=*/", spec.padding,
                     ", /*dilation=*/", spec.dilation, ", /*groups=*/", groups,
                     spec.bias ? "" : ", /*bias=*/false", ")");
      break;
    }
    case LayerKind::kConv3d: {
      TANDEM_CHECK(rank == 5, "Conv3d needs [N, C, D, H, W]");
      const int64_t groups =
          channels % spec.groups == 0 && spec.out % spec.groups == 0 ? spec.groups : 1;
      module = std::make_shared<nn::Conv3d>(
          nn::Conv3dOptions{channels, spec.out, spec.kernel, spec.stride, spec.padding,
                            spec.dilation, groups, spec.bias, dtype});
      code = str_cat("nn::Conv3d(", channels, ", ", spec.out, ", ", spec.kernel, ", /*stride=*/",
                     spec.stride, ", /*padding=*/", spec.padding, ", /*dilation=*/", spec.dilation,
                     ", /*groups=*/", groups, spec.bias ? "" : ", /*bias=*/false", ")");
      break;
    }
    case LayerKind::kConvTranspose2d:
    case LayerKind::kConvTranspose1d: {
      const bool one_d = spec.kind == LayerKind::kConvTranspose1d;
      TANDEM_CHECK(rank == (one_d ? 3 : 4), one_d ? "ConvTranspose1d needs [N, C, L]"
                                                  : "ConvTranspose2d needs [N, C, H, W]");
      const int64_t groups =
          channels % spec.groups == 0 && spec.out % spec.groups == 0 ? spec.groups : 1;
      if (one_d) {
        module = std::make_shared<nn::ConvTranspose1d>(
            nn::ConvTranspose1dOptions{channels, spec.out, spec.kernel, spec.stride, spec.padding,
                                       spec.axes, groups, spec.bias, spec.dilation, dtype});
      } else {
        module = std::make_shared<nn::ConvTranspose2d>(
            nn::ConvTranspose2dOptions{channels, spec.out, spec.kernel, spec.stride, spec.padding,
                                       spec.axes, groups, spec.bias, spec.dilation, dtype});
      }
      code =
          str_cat(one_d ? "nn::ConvTranspose1d(" : "nn::ConvTranspose2d(", channels, ", ", spec.out,
                  ", ", spec.kernel, ", /*stride=*/", spec.stride, ", /*padding=*/", spec.padding,
                  ", /*output_padding=*/", spec.axes, ", /*groups=*/", groups, ", /*bias=*/",
                  spec.bias ? "true" : "false", ", /*dilation=*/", spec.dilation, ")");
      break;
    }
    case LayerKind::kUpsample: {
      TANDEM_CHECK(rank == 3 || rank == 4, "Upsample needs [N, C, L] or [N, C, H, W]");
      module = std::make_shared<nn::Upsample>(nn::UpsampleOptions{
          .scale_factor = {spec.value}, .mode = spec.activation, .align_corners = spec.causal});
      code = str_cat("nn::Upsample({.scale_factor = {", spec.value, "}, .mode = \"",
                     spec.activation, "\"", spec.causal ? ", .align_corners = true" : "", "})");
      break;
    }
    case LayerKind::kBatchNorm: {
      TANDEM_CHECK(rank >= 2 && rank <= 4, "batch norm needs rank 2, 3 or 4");
      std::shared_ptr<nn::BatchNorm> norm;
      const nn::BatchNormOptions options{.num_features = channels, .dtype = dtype};
      if (rank == 4) {
        norm = std::make_shared<nn::BatchNorm2d>(options);
        code = str_cat("nn::BatchNorm2d(", channels, ")");
      } else {
        norm = std::make_shared<nn::BatchNorm1d>(options);
        code = str_cat("nn::BatchNorm1d(", channels, ")");
      }
      randomize_norm(norm->weight(), norm->bias());
      {
        NoGradGuard no_grad;
        norm->running_mean().assign_(mul(randn({channels}, dtype), 0.5));
        norm->running_var().assign_(add(rand({channels}, dtype), 0.5));
      }
      module = norm;
      model.has_batch_norm = true;
      break;
    }
    case LayerKind::kLayerNorm: {
      const int64_t axes = std::min<int64_t>(spec.axes, rank - 1);
      TANDEM_CHECK(axes >= 1, "LayerNorm needs an axis after the batch");
      std::vector<int64_t> normalized(in.end() - axes, in.end());
      auto norm = std::make_shared<nn::LayerNorm>(
          nn::LayerNormOptions{.normalized_shape = normalized, .dtype = dtype});
      randomize_norm(norm->weight(), norm->bias());
      module = norm;
      code = str_cat("nn::LayerNorm(", dims_text(normalized), ")");
      break;
    }
    case LayerKind::kReLU:
      module = std::make_shared<nn::ReLU>();
      code = "nn::ReLU()";
      break;
    case LayerKind::kLeakyReLU:
      module = std::make_shared<nn::LeakyReLU>(spec.value);
      code = str_cat("nn::LeakyReLU(", spec.value, ")");
      break;
    case LayerKind::kGELU:
      module = std::make_shared<nn::GELU>();
      code = "nn::GELU()";
      break;
    case LayerKind::kSigmoid:
      module = std::make_shared<nn::Sigmoid>();
      code = "nn::Sigmoid()";
      break;
    case LayerKind::kTanh:
      module = std::make_shared<nn::Tanh>();
      code = "nn::Tanh()";
      break;
    case LayerKind::kActivation:
      std::tie(module, code) = activation_module(spec);
      break;
    case LayerKind::kDropout:
      module = std::make_shared<nn::Dropout>(spec.value);
      code = str_cat("nn::Dropout(", spec.value, ")");
      model.has_dropout = true;
      break;
    case LayerKind::kMaxPool2d:
    case LayerKind::kAvgPool2d: {
      TANDEM_CHECK(rank == 4, "pooling needs [N, C, H, W]");
      const bool max = spec.kind == LayerKind::kMaxPool2d;
      if (max) {
        module =
            std::make_shared<nn::MaxPool2d>(spec.kernel, spec.stride, spec.padding, spec.dilation);
      } else {
        module = std::make_shared<nn::AvgPool2d>(spec.kernel, spec.stride, spec.padding);
      }
      code = str_cat(max ? "nn::MaxPool2d(" : "nn::AvgPool2d(", spec.kernel, ", /*stride=*/",
                     spec.stride, ", /*padding=*/", spec.padding,
                     max ? str_cat(", /*dilation=*/", spec.dilation) : "", ")");
      break;
    }
    case LayerKind::kAdaptiveAvgPool2d:
      TANDEM_CHECK(rank == 4, "pooling needs [N, C, H, W]");
      module = std::make_shared<nn::AdaptiveAvgPool2d>(spec.axes);
      code = str_cat("nn::AdaptiveAvgPool2d(", spec.axes, ")");
      break;
    case LayerKind::kFlatten:
      TANDEM_CHECK(spec.axes >= 1 && spec.axes < rank, "nothing to flatten");
      module = std::make_shared<nn::Flatten>(spec.axes);
      code = str_cat("nn::Flatten(", spec.axes, ")");
      break;
    case LayerKind::kEmbedding:
      TANDEM_CHECK(false, "an Embedding comes only first, on token input (build())");
    case LayerKind::kPositionalEncoding:
      TANDEM_CHECK(rank == 3 && in[1] <= spec.axes,
                   "positional encoding needs [N, seq, features] with seq <= max_len");
      module = std::make_shared<nn::PositionalEncoding>(nn::PositionalEncodingOptions{
          .d_model = last, .max_len = spec.axes, .dropout = spec.value, .dtype = dtype});
      code = str_cat("nn::PositionalEncoding({.d_model = ", last, ", .max_len = ", spec.axes,
                     ", .dropout = ", spec.value, "})");
      model.has_dropout = model.has_dropout || spec.value > 0;
      break;
    case LayerKind::kTransformerEncoderLayer: {
      TANDEM_CHECK(rank == 3 && last % spec.heads == 0,
                   "a transformer encoder layer needs [N, seq, features] with heads dividing "
                   "the features");
      auto encoder = std::make_shared<nn::TransformerEncoderLayer>(nn::TransformerLayerOptions{
          .d_model = last,
          .nhead = spec.heads,
          .dim_feedforward = spec.out,
          .dropout = spec.value,
          .activation = spec.activation == "gelu" ? nn::TransformerActivation::kGELU
                                                  : nn::TransformerActivation::kReLU,
          .norm_first = spec.norm_first,
          .bias = spec.bias,
          .causal = spec.causal,
          .dtype = dtype});
      // Zero biases (the projections' initial ones) would hide a bias in
      // the wrong place.
      for (const auto& [name, child] : encoder->named_children()) {
        if (auto norm = std::dynamic_pointer_cast<nn::LayerNorm>(child)) {
          randomize_norm(norm->weight(), norm->bias());
        }
      }
      if (spec.bias) {
        auto attention = std::static_pointer_cast<nn::MultiheadAttention>(
            encoder->named_children().front().second);
        randomize_norm({}, attention->in_proj_bias());
        randomize_norm({}, attention->out_proj()->bias());
      }
      module = encoder;
      code = str_cat("nn::TransformerEncoderLayer({.d_model = ", last, ", .nhead = ", spec.heads,
                     ", .dim_feedforward = ", spec.out, ", .dropout = ", spec.value,
                     ", .activation = nn::TransformerActivation::",
                     spec.activation == "gelu" ? "kGELU" : "kReLU",
                     ", .norm_first = ", spec.norm_first ? "true" : "false",
                     ", .bias = ", spec.bias ? "true" : "false",
                     ", .causal = ", spec.causal ? "true" : "false", "})");
      model.has_dropout = model.has_dropout || spec.value > 0;
      break;
    }
    case LayerKind::kRecurrent: {
      TANDEM_CHECK(rank == 3, "a recurrent layer needs [N, seq, features]");
      const std::map<std::string, nn::RecurrentKind> kinds = {
          {"RNN", nn::RecurrentKind::kRnnTanh},
          {"RNN_relu", nn::RecurrentKind::kRnnRelu},
          {"LSTM", nn::RecurrentKind::kLstm},
          {"GRU", nn::RecurrentKind::kGru}};
      const nn::RecurrentOptions options{.input_size = last,
                                         .hidden_size = spec.out,
                                         .num_layers = spec.num_layers,
                                         .bias = spec.bias,
                                         .dropout = spec.value,
                                         .bidirectional = spec.bidirectional,
                                         .dtype = dtype};
      module = std::make_shared<nn::Recurrent>(kinds.at(spec.activation), options);
      const bool relu = spec.activation == "RNN_relu";
      code = str_cat("nn::", relu ? "RNN" : spec.activation, "({.input_size = ", last,
                     ", .hidden_size = ", spec.out, ", .num_layers = ", spec.num_layers,
                     ", .bias = ", spec.bias ? "true" : "false", ", .dropout = ", spec.value,
                     ", .bidirectional = ", spec.bidirectional ? "true" : "false", "}",
                     relu ? ", /*relu=*/true" : "", ")");
      model.has_dropout = model.has_dropout || (spec.value > 0 && spec.num_layers > 1);
      break;
    }
    case LayerKind::kSequential:
      return build_sequence(spec.children, in, indent, context);
    case LayerKind::kResidual: {
      Layer body = build_sequence(spec.children, in, indent, context);
      TANDEM_CHECK(body.output == in, "a residual body must keep the shape ", in.to_string(),
                   ", its output is ", body.output.to_string());
      auto body_module = std::static_pointer_cast<nn::Sequential>(body.module);
      return {std::make_shared<Residual>(body_module), in, str_cat("Residual(", body.code, ")")};
    }
  }
  // The output shape, from the module itself: eval mode, no gradients, so
  // nothing random is drawn and no statistic moves.
  module->eval();
  Shape out;
  {
    NoGradGuard no_grad;
    Tensor probe = zeros(Dims(in.begin(), in.end()), dtype);
    out = module->forward(probe).shape();
  }
  module->train();
  return {module, out, code};
}

BuiltModel build_modules(const ModelSpec& spec, DType dtype, uint64_t jitter) {
  manual_seed(spec.seed);
  BuiltModel model;
  model.dtype = dtype;
  Context context{dtype, jitter, model};
  model.model = std::make_shared<nn::Sequential>();
  Dims dims{spec.batch};
  dims.insert(dims.end(), spec.input.begin(), spec.input.end());
  Shape shape{Shape(absl::MakeConstSpan(dims))};
  std::string body;
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& layer = spec.layers[i];
    Layer built;
    if (layer.kind == LayerKind::kEmbedding) {
      TANDEM_CHECK(i == 0 && spec.tokens, "an Embedding comes first, on token input");
      auto embedding = std::make_shared<nn::Embedding>(spec.vocab, layer.out, dtype);
      Shape out{spec.batch, spec.input[0], layer.out};
      built = {embedding, out, str_cat("nn::Embedding(", spec.vocab, ", ", layer.out, ")")};
    } else {
      TANDEM_CHECK(!(spec.tokens && i == 0), "token input needs an Embedding first");
      built = build_layer(layer, shape, 4, context);
    }
    append(*model.model, i, built.module, context);
    shape = built.output;
    body += str_cat("\n    ", built.code, i + 1 < spec.layers.size() ? "," : "", "  // -> ",
                    shape_text(shape));
  }
  TANDEM_CHECK(!spec.layers.empty(), "a model needs a layer");
  model.output = shape;
  Dims input_dims{spec.batch};
  input_dims.insert(input_dims.end(), spec.input.begin(), spec.input.end());
  model.code = str_cat(
      "// difftest model ", spec.seed, ": ", spec.tokens ? "int64 tokens in [0, " : "",
      spec.tokens ? str_cat(spec.vocab, ") ") : "", "input ",
      Shape(absl::MakeConstSpan(input_dims)).to_string(), ", also run at batch ", spec.other_batch,
      "\n// Residual(body) computes x + body(x).\nauto model = "
      "std::make_shared<nn::Sequential>(",
      body, "\n);\n");
  return model;
}

}  // namespace

BuiltModel build(const ModelSpec& spec, DType dtype, uint64_t jitter) {
  if (dtype != DType::kFloat32) {
    // The float32 model's values in another dtype: build the modules, then
    // load the float32 model's state converted.
    BuiltModel single = build(spec);
    BuiltModel model = build_modules(spec, dtype, jitter);
    nn::StateDict state;
    for (const auto& [name, tensor] : single.model->state_dict()) {
      state.insert(name, cast(tensor, dtype));
    }
    model.model->load_state_dict(state);
    return model;
  }
  return build_modules(spec, dtype, jitter);
}

Tensor model_input(const ModelSpec& spec, int64_t batch, uint64_t seed) {
  manual_seed(seed);
  Dims dims{batch};
  dims.insert(dims.end(), spec.input.begin(), spec.input.end());
  if (!spec.tokens) return randn(dims);
  return cast(mul(rand(dims, DType::kFloat64), static_cast<double>(spec.vocab)), DType::kInt64);
}

namespace {

// Tanh, or (as often) one of the other activation modules.
LayerSpec random_tanh_or_activation(Draw& draw) {
  LayerSpec layer;
  if (draw.chance(0.5)) {
    layer.kind = LayerKind::kTanh;
    return layer;
  }
  layer.kind = LayerKind::kActivation;
  layer.activation = kActivations[draw.in(0, static_cast<int64_t>(std::size(kActivations)) - 1)];
  layer.value = draw.one_of({0.5, 1.0, 2.0});
  return layer;
}

// A layer that keeps the shape of `in`, for a residual body.
LayerSpec shape_keeping_layer(Draw& draw, const Shape& in) {
  const int rank = in.rank();
  LayerSpec layer;
  switch (draw.in(0, 9)) {
    case 0:
      layer.kind = LayerKind::kLinear;
      layer.out = in[rank - 1];
      break;
    case 1:
      if (rank == 4) {
        layer.kind = LayerKind::kConv2d;
        layer.out = in[1];
        layer.kernel = draw.one_of({1, 3});
        layer.padding = layer.kernel / 2;
        layer.groups = draw.chance(0.3) ? in[1] : 1;
        break;
      }
      [[fallthrough]];
    case 2:
      layer.kind = LayerKind::kBatchNorm;
      break;
    case 3:
      layer.kind = LayerKind::kLayerNorm;
      layer.axes = draw.in(1, rank - 1);
      break;
    case 4:
      layer.kind = LayerKind::kLeakyReLU;
      layer.value = draw.one_of({0.01, 0.2});
      break;
    case 5:
      layer.kind = LayerKind::kGELU;
      break;
    case 6:
      layer.kind = LayerKind::kSigmoid;
      break;
    case 7:
      layer = random_tanh_or_activation(draw);
      break;
    case 8:
      layer.kind = LayerKind::kDropout;
      layer.value = draw.one_of({0.1, 0.5});
      break;
    default:
      layer.kind = LayerKind::kReLU;
  }
  return layer;
}

// A transformer encoder layer over [N, seq, features]: 1 to 4 heads that
// divide the features.
LayerSpec random_encoder_layer(Draw& draw, const Shape& in) {
  LayerSpec layer;
  layer.kind = LayerKind::kTransformerEncoderLayer;
  std::vector<int64_t> heads;
  for (int64_t h = 1; h <= std::min<int64_t>(4, in[2]); ++h) {
    if (in[2] % h == 0) heads.push_back(h);
  }
  layer.heads = heads[static_cast<size_t>(draw.in(0, static_cast<int64_t>(heads.size()) - 1))];
  layer.out = draw.in(2, 16);
  layer.value = draw.one_of({0.0, 0.1});
  layer.activation = draw.chance(0.5) ? "relu" : "gelu";
  layer.bias = draw.chance(0.8);
  layer.norm_first = draw.chance(0.5);
  layer.causal = draw.chance(0.5);
  return layer;
}

// An RNN, LSTM or GRU over [N, seq, features].
LayerSpec random_recurrent_layer(Draw& draw) {
  LayerSpec layer;
  layer.kind = LayerKind::kRecurrent;
  constexpr const char* kKinds[] = {"RNN", "RNN_relu", "LSTM", "GRU"};
  layer.activation = kKinds[draw.in(0, 3)];
  layer.out = draw.in(2, 8);
  layer.num_layers = draw.in(1, 2);
  layer.bidirectional = draw.chance(0.5);
  layer.bias = draw.chance(0.8);
  layer.value = layer.num_layers > 1 ? draw.one_of({0.0, 0.2}) : 0.0;
  return layer;
}

LayerSpec random_upsample(Draw& draw) {
  LayerSpec layer;
  layer.kind = LayerKind::kUpsample;
  layer.value = draw.one_of({2.0, 1.5});
  layer.activation = draw.chance(0.5) ? "nearest" : "linear";
  layer.causal = layer.activation == "linear" && draw.chance(0.5);
  return layer;
}

LayerSpec random_layer(Draw& draw, const Shape& in, int depth) {
  const int rank = in.rank();
  LayerSpec layer;
  // Weights: convolutions and pooling only on images; blocks only shallow.
  const int64_t choice = draw.in(0, depth < 2 ? 15 : 13);
  if (rank == 5 && choice <= 3) {  // Volumes: 3-d convolutions, else the rank-free layers.
    layer.kind = LayerKind::kConv3d;
    layer.out = draw.in(1, 4);
    layer.kernel = draw.in(1, 2);
    layer.stride = draw.in(1, 2);
    layer.padding = draw.in(0, 1);
    layer.dilation = draw.chance(0.25) ? 2 : 1;
    layer.groups = draw.chance(0.25) ? 2 : 1;
    layer.bias = draw.chance(0.8);
    return layer;
  }
  if (rank == 4 && choice <= 4) {
    switch (choice) {
      case 0:
      case 1:
        layer.kind = draw.chance(0.25) ? LayerKind::kConvTranspose2d : LayerKind::kConv2d;
        layer.out = draw.in(1, 6);
        layer.kernel = draw.in(1, 3);
        layer.stride = draw.in(1, 2);
        layer.padding = draw.in(0, 1);
        layer.dilation = draw.chance(0.25) ? 2 : 1;
        layer.groups = draw.chance(0.25) ? draw.in(2, 3) : 1;
        layer.bias = draw.chance(0.8);
        // Below the stride (and 0 at stride 1).
        if (layer.kind == LayerKind::kConvTranspose2d) layer.axes = draw.in(0, layer.stride - 1);
        return layer;
      case 2:
      case 3:
        layer.kind = draw.chance(0.5) ? LayerKind::kMaxPool2d : LayerKind::kAvgPool2d;
        layer.kernel = draw.in(2, 3);
        layer.stride = draw.in(1, layer.kernel);
        layer.padding = draw.in(0, layer.kernel / 2);
        if (layer.kind == LayerKind::kMaxPool2d && draw.chance(0.25)) layer.dilation = 2;
        return layer;
      default:
        if (draw.chance(0.25)) return random_upsample(draw);
        if (draw.chance(0.5)) {
          layer.kind = LayerKind::kAdaptiveAvgPool2d;
          layer.axes = draw.in(1, std::min<int64_t>(3, std::min(in[2], in[3])));
        } else {
          layer.kind = LayerKind::kFlatten;
          layer.axes = draw.in(1, 2);
        }
        return layer;
    }
  }
  switch (choice) {
    case 0:
    case 1:
    case 2:
      layer.kind = LayerKind::kLinear;
      layer.out = draw.in(2, 12);
      layer.bias = draw.chance(0.8);
      return layer;
    case 3:
      if (rank == 3) {
        if (draw.chance(0.5)) return random_encoder_layer(draw, in);
        layer.kind = LayerKind::kFlatten;
        layer.axes = 1;
        return layer;
      }
      layer.kind = LayerKind::kBatchNorm;
      return layer;
    case 4:
      if (rank == 3 && draw.chance(0.5)) return random_encoder_layer(draw, in);
      if (rank == 3 && draw.chance(0.3)) {
        // Room for the lengths the free-length check runs at (up to 3 more).
        layer.kind = LayerKind::kPositionalEncoding;
        layer.axes = in[1] + draw.in(3, 12);
        layer.value = draw.one_of({0.0, 0.1});
        return layer;
      }
      layer.kind = LayerKind::kLayerNorm;
      layer.axes = draw.in(1, std::min(rank - 1, 3));
      return layer;
    case 5:
      layer.kind = LayerKind::kBatchNorm;
      return layer;
    case 6:
    case 7:
      layer.kind = LayerKind::kReLU;
      return layer;
    case 8:
      layer.kind = LayerKind::kLeakyReLU;
      layer.value = draw.one_of({0.01, 0.2});
      return layer;
    case 9:
      if (rank == 3 && draw.chance(0.5)) return random_recurrent_layer(draw);
      layer.kind = LayerKind::kGELU;
      return layer;
    case 10:
      if (rank == 3 && draw.chance(0.5)) {
        layer.kind = draw.chance(0.25) ? LayerKind::kConvTranspose1d : LayerKind::kConv1d;
        layer.out = draw.in(1, 6);
        layer.kernel = draw.in(1, 3);
        layer.stride = draw.chance(0.75) ? 1 : 2;
        layer.padding = draw.in(0, 1);
        layer.dilation = draw.chance(0.25) ? 2 : 1;
        layer.groups = draw.chance(0.25) ? draw.in(2, 3) : 1;
        layer.bias = draw.chance(0.8);
        // Below the stride (and 0 at stride 1).
        if (layer.kind == LayerKind::kConvTranspose1d) layer.axes = draw.in(0, layer.stride - 1);
        return layer;
      }
      if (rank == 3 && draw.chance(0.3)) return random_upsample(draw);
      layer.kind = LayerKind::kSigmoid;
      return layer;
    case 11:
      return random_tanh_or_activation(draw);
    case 12:
    case 13:
      layer.kind = LayerKind::kDropout;
      layer.value = draw.one_of({0.1, 0.5});
      return layer;
    case 14: {
      layer.kind = LayerKind::kResidual;
      const int64_t n = draw.in(1, 3);
      for (int64_t i = 0; i < n; ++i) layer.children.push_back(shape_keeping_layer(draw, in));
      return layer;
    }
    default:
      layer.kind = LayerKind::kSequential;  // Children are drawn by the caller.
      return layer;
  }
}

// Appends up to `count` layers that fit, starting from `shape`; returns the
// shape after them.
Shape add_layers(Draw& draw, std::vector<LayerSpec>& layers, Shape shape, int64_t count,
                 int depth) {
  BuiltModel scratch;
  for (int64_t i = 0; i < count; ++i) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      LayerSpec layer = random_layer(draw, shape, depth);
      if (layer.kind == LayerKind::kSequential) {
        add_layers(draw, layer.children, shape, draw.in(1, 3), depth + 1);
        if (layer.children.empty()) continue;
      }
      try {
        Context context{DType::kFloat32, 0, scratch};
        Shape out = build_layer(layer, shape, 0, context).output;
        // Keep models small and every axis non-empty.
        if (out.numel() == 0 || out.numel() > 4096) continue;
        layers.push_back(std::move(layer));
        shape = out;
        break;
      } catch (const Error&) {
        // Does not fit this shape (a window larger than the image): draw again.
      }
    }
  }
  return shape;
}

int count(const std::vector<LayerSpec>& layers) {
  int n = 0;
  for (const LayerSpec& layer : layers) n += 1 + count(layer.children);
  return n;
}

// Every spec with one layer of `layers` (at any depth) removed or a block
// replaced by its children; `make` turns the edited list into a whole spec.
void collect_smaller(const std::vector<LayerSpec>& layers,
                     const std::function<void(std::vector<LayerSpec>)>& make) {
  for (size_t i = 0; i < layers.size(); ++i) {
    std::vector<LayerSpec> without = layers;
    without.erase(without.begin() + static_cast<std::ptrdiff_t>(i));
    make(without);
    if (layers[i].children.empty()) continue;
    std::vector<LayerSpec> inlined = layers;
    inlined.erase(inlined.begin() + static_cast<std::ptrdiff_t>(i));
    inlined.insert(inlined.begin() + static_cast<std::ptrdiff_t>(i), layers[i].children.begin(),
                   layers[i].children.end());
    make(inlined);
    collect_smaller(layers[i].children, [&](std::vector<LayerSpec> children) {
      if (children.empty()) return;
      std::vector<LayerSpec> edited = layers;
      edited[i].children = std::move(children);
      make(edited);
    });
  }
}

}  // namespace

ModelSpec random_model(uint64_t seed) {
  Draw draw(seed);
  ModelSpec spec;
  spec.seed = seed;
  spec.batch = draw.in(2, 5);
  spec.other_batch = draw.in(1, 6);
  if (spec.other_batch == spec.batch) spec.other_batch = spec.batch + 1;
  const int64_t kind = draw.in(0, 19);
  if (kind < 8) {
    spec.input = {draw.in(1, 4), draw.in(4, 10), draw.in(4, 10)};
    // A sixth of the images are volumes, [C, D, H, W].
    if (draw.chance(1.0 / 6)) spec.input.insert(spec.input.begin() + 1, draw.in(2, 5));
  } else if (kind < 14) {
    spec.input = {draw.in(2, 24)};
  } else if (kind < 17) {
    spec.input = {draw.in(2, 6), draw.in(3, 10)};
  } else {
    spec.tokens = true;
    spec.vocab = draw.in(5, 20);
    spec.input = {draw.in(2, 6)};
  }
  Dims dims{spec.batch};
  dims.insert(dims.end(), spec.input.begin(), spec.input.end());
  Shape shape(absl::MakeConstSpan(dims));
  if (spec.tokens) {
    LayerSpec embedding;
    embedding.kind = LayerKind::kEmbedding;
    embedding.out = draw.in(2, 8);
    spec.layers.push_back(embedding);
    shape = Shape{spec.batch, spec.input[0], embedding.out};
  }
  add_layers(draw, spec.layers, shape, draw.in(1, 8), 0);
  if (spec.layers.empty() || (spec.tokens && spec.layers.size() == 1)) {
    LayerSpec relu;
    spec.layers.push_back(relu);
  }
  return spec;
}

std::vector<ModelSpec> smaller_specs(const ModelSpec& spec) {
  std::vector<ModelSpec> out;
  collect_smaller(spec.layers, [&](std::vector<LayerSpec> layers) {
    if (layers.empty()) return;
    ModelSpec smaller = spec;
    smaller.layers = std::move(layers);
    out.push_back(std::move(smaller));
  });
  return out;
}

int count_layers(const ModelSpec& spec) { return count(spec.layers); }

}  // namespace tandem::difftest
