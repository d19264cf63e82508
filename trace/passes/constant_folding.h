// Constant folding: a node whose inputs are all constants (kConstant graph
// inputs, or outputs of nodes folded before it), or which has no inputs at
// all (zeros, full, arange), computes the same values on every call, so it
// is run once here, through eager dispatch, and its results become new
// kConstant graph inputs that its readers read instead.
//
// What stays a node:
//   - random ops (kernels::is_random: a "seed" attribute): the executor may draw a
//     fresh seed per call (trace/executor.h), so their values are not fixed;
//   - nodes reading a kState input, even in inference graphs: state is read
//     live and may change between calls (the caller rebinds parameters);
//   - nodes with an output of more than kMaxFoldedElements elements: a
//     constant lives in the graph for its whole life and is copied with it
//     (and serialized with it), while the node costs one cheap kernel per
//     call; `expand` to a big shape is the typical case;
//   - nodes writing a graph output: the executor hands each call fresh
//     output tensors that the caller owns, which a shared constant is not.
//     Their inputs still fold.
//
// Inputs are never removed or reordered (callers bind them by position): the
// new constants are appended after the existing inputs. Values computed only
// to feed other folded nodes are not kept. The folded nodes are removed.
#pragma once

#include <cstdint>
#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// The largest output, in elements, that folding materializes.
inline constexpr int64_t kMaxFoldedElements = int64_t{1} << 20;

// Counts the nodes folded (and removed).
class ConstantFolding final : public Pass {
 public:
  std::string_view name() const override { return "constant_folding"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
