// Dead-code elimination: drops nodes none of whose outputs reaches a graph
// output. Ops are pure (kernels write only their outputs), so a node nobody
// reads has no effect. Constants nothing reads go too (batch-norm folding
// and constant folding leave the parameters they replaced so; a loaded model
// would otherwise keep two copies of its weights). Data and state inputs stay
// (the caller binds them by position), even when nothing reads them. Unused
// values are compacted away.
#pragma once

#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// Counts the nodes and constants removed.
class DeadCodeElimination final : public Pass {
 public:
  std::string_view name() const override { return "dead_code"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
