// Dead-code elimination: drops nodes none of whose outputs reaches a graph
// output. Ops are pure (kernels write only their outputs), so a node nobody
// reads has no effect. Constants nothing reads go too (batch-norm folding
// and constant folding leave the parameters they replaced so; a loaded model
// would otherwise keep two copies of its weights). Data and state inputs stay
// (the caller binds them by position), even when nothing reads them. Unused
// values are compacted away.
#pragma once

#include "trace/graph.h"

namespace tandem::trace {

// Returns the number of nodes and constants removed.
int eliminate_dead_code(Graph& graph);

}  // namespace tandem::trace
