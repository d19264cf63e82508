// Activation fusion: a conv2d or linear followed by its activation becomes
// one conv2d (linear) node with the "activation" attribute, which oneDNN
// applies as an eltwise post-op while each output element is still in
// registers (Note [Fused activation] in kernels/cpu/onednn.h), instead of a
// second pass that reads and writes the whole tensor.
//
//   %3 = conv2d(%0, %1, %2) {..., activation="none"}; %4 = relu(%3)
//   becomes
//   %4 = conv2d(%0, %1, %2) {..., activation="relu"}
//
// Fused when:
//   - the layer's activation is "none" (one activation per layer);
//   - its output has exactly one reader, which is relu, gelu, sigmoid, tanh
//     or leaky_relu (alpha carried over), and is not a graph output;
//   - the activation writes float32 of the layer output's shape (float32 is
//     what runs on oneDNN; elsewhere fusion saves little).
// The pre-activation value then disappears. That is valid in training graphs
// too: backward nodes that need it would be further readers (and the
// activation gradients that read the activation's own output still find it),
// so the one-reader rule is the whole condition. The fused node stays where
// the layer was (its inputs are written by then; the activation's readers
// all come later) and keeps the layer's source location.
#pragma once

#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// Counts the activation nodes removed.
class ActivationFusion final : public Pass {
 public:
  std::string_view name() const override { return "activation_fusion"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
