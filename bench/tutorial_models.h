// The models of tutorials/02_train_fashion_mnist.cpp and 05_language_model
// .cpp, for the benchmarks that measure them (bench_train, bench_hybridize,
// bench_sequence; the tutorials keep their own copies, written to be read:
// these must stay the same architecture), and LeNet-5 of the standard
// workloads.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "tandem/tandem.h"

namespace bench {

// Two conv blocks and a classifier: ~0.4M parameters.
inline std::shared_ptr<tandem::nn::Module> make_tutorial_cnn() {
  namespace nn = tandem::nn;
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, 1, 1), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, 1, 1), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Dropout(0.25), nn::Linear(128, 10));
}

inline std::shared_ptr<tandem::nn::Module> make_tutorial_mlp() {
  namespace nn = tandem::nn;
  return std::make_shared<nn::Sequential>(nn::Flatten(), nn::Linear(28 * 28, 256), nn::ReLU(),
                                          nn::Linear(256, 128), nn::ReLU(), nn::Linear(128, 10));
}

// Tutorial 05's byte-level causal transformer: 2 pre-norm layers of
// d_model 128, 4 heads, GELU, a final norm; [batch, seq] bytes in,
// [batch, seq, 256] logits out.
inline std::shared_ptr<tandem::nn::Module> make_tutorial_language_model() {
  namespace nn = tandem::nn;
  using S = SequenceShapes;
  nn::TransformerLayerOptions layer{.d_model = S::kLmModel,
                                    .nhead = S::kLmHeads,
                                    .dim_feedforward = 4 * S::kLmModel,
                                    .dropout = S::kLmDropout,
                                    .activation = nn::TransformerActivation::kGELU,
                                    .norm_first = true,
                                    .causal = true};
  return std::make_shared<nn::Sequential>(
      nn::Embedding(S::kLmVocab, S::kLmModel),
      nn::PositionalEncoding(
          {.d_model = S::kLmModel, .max_len = S::kLmContext, .dropout = S::kLmDropout}),
      nn::TransformerEncoder(layer, S::kLmLayers, /*final_norm=*/true),
      nn::Linear(S::kLmModel, S::kLmVocab));
}

// LeNet-5 of the standard workloads (Note [Standard workloads] in harness.h).
inline std::shared_ptr<tandem::nn::Module> make_lenet5() {
  namespace nn = tandem::nn;
  return std::make_shared<nn::Sequential>(nn::Conv2d(1, 6, 5, 1, 2), nn::ReLU(), nn::MaxPool2d(2),
                                          nn::Conv2d(6, 16, 5), nn::ReLU(), nn::MaxPool2d(2),
                                          nn::Flatten(), nn::Linear(400, 120), nn::ReLU(),
                                          nn::Linear(120, 84), nn::ReLU(), nn::Linear(84, 10));
}

// The standard workloads' models by name: "mlp" (the tutorial's) or "lenet".
inline std::shared_ptr<tandem::nn::Module> make_standard_model(const std::string& name) {
  return name == "lenet" ? make_lenet5() : make_tutorial_mlp();
}

// One training step as a HybridFunction runs it, eager or traced: the
// batch's cross-entropy loss, backward, and an optimizer step; returns the
// loss. `model` and `opt` must outlive the function.
inline tandem::HybridFunction::Fn training_step(tandem::nn::Module& model,
                                                tandem::optim::Optimizer& opt) {
  return [&model, &opt](const std::vector<tandem::Tensor>& in) {
    opt.zero_grad();
    tandem::Tensor loss = tandem::cross_entropy(model.forward(in[0]), in[1]);
    loss.backward();
    opt.step();
    return std::vector<tandem::Tensor>{loss};
  };
}

}  // namespace bench
