// Batch-norm folding, for inference graphs: a conv2d (or linear) whose only
// reader is a batch_norm in evaluation mode computes
//   y = (conv(x, w) + b - mean) * gamma / sqrt(var + eps) + beta,
// which, since the normalization is affine per output channel, equals
//   conv(x, w') + b'  with  s = gamma / sqrt(var + eps),
//   w' = w * s (each output channel's filter scaled by its s),
//   b' = (b - mean) * s + beta.
// The pair becomes the nodes computing s, w' and b' from the parameters plus
// one conv2d (linear) writing what batch_norm wrote: the batch_norm pass over
// the activations disappears, and the parameter arithmetic is O(weights).
//
// In an inference graph the parameters and running statistics are state
// inputs, read live on each call, so w' and b' are nodes, not constants:
// the graph stays correct when the weights are reloaded. (When they are
// constants, constant folding folds them.)
//
// Valid only when:
//   - the graph is for inference (the pipeline runs this pass only with
//     OptimizeOptions::inference; a graph that trains needs the conv's own
//     output, e.g. for gradients, and batch statistics);
//   - batch_norm has training = false, so it uses the running statistics,
//     and its mean/var outputs (copies of them) are unread;
//   - the conv's (linear's) output reaches the batch_norm with nothing in
//     between: its "activation" attribute is "none" (a layer that already
//     carries a fused activation, as in a graph optimized once and loaded
//     again, computes act(conv(x)); the normalization cannot be pushed
//     through the activation), it has no other reader and is not a graph
//     output;
//   - the output's axis 1 is the channel axis batch_norm normalizes: always
//     for conv2d ([N, O, H, W]); for linear only when the output is [N, O].
// Dtypes need no check: batch_norm and conv2d/linear require their inputs
// to share one floating dtype.
#pragma once

#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// Counts the batch_norm nodes folded. One run folds every pair it finds;
// a folded layer writes what its batch_norm wrote, so in a chain
// layer -> batch_norm -> batch_norm the second pair appears only then: the
// pipeline runs the pass under FixedPoint, which folds the chain whole.
class BatchNormFolding final : public Pass {
 public:
  std::string_view name() const override { return "batch_norm_folding"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
