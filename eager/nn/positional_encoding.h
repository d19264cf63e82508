// nn::PositionalEncoding: adds the sinusoidal position signal of "Attention
// Is All You Need" to a batch of embedded sequences, then dropout (as the
// PyTorch tutorials' module of that name):
//
//   auto pos = std::make_shared<nn::PositionalEncoding>(64);   // d_model
//   Tensor y = (*pos)(embed->forward(tokens));    // [batch, seq, 64] (batch_first)
//
//   pe[p, 2i]     = sin(p / 10000^(2i / d_model))
//   pe[p, 2i + 1] = cos(p / 10000^(2i / d_model))
//
// The table, [max_len, d_model], is computed once, in float64 then
// converted, and kept as a constant: it is not trained and not saved (any
// instance recomputes the same values). A sequence longer than max_len is a
// tandem::Error naming both.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "eager/nn/module.h"

namespace tandem::nn {

struct PositionalEncodingOptions {
  int64_t d_model = 0;
  int64_t max_len = 5000;
  double dropout = 0.1;
  // [batch, seq, d_model]; false: [seq, batch, d_model].
  bool batch_first = true;
  DType dtype = DType::kFloat32;
};

class PositionalEncoding : public Module {
 public:
  explicit PositionalEncoding(const PositionalEncodingOptions& options);
  explicit PositionalEncoding(int64_t d_model)
      : PositionalEncoding(PositionalEncodingOptions{.d_model = d_model}) {}

  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "PositionalEncoding"; }
  std::string extra_repr() const override;

  const PositionalEncodingOptions& options() const { return options_; }
  // The table, [max_len, d_model].
  const Tensor& table() const { return table_; }

 private:
  PositionalEncodingOptions options_;
  Tensor table_;
};

}  // namespace tandem::nn
