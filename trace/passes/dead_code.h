// Dead-code elimination: drops nodes none of whose outputs reaches a graph
// output. Ops are pure (kernels write only their outputs), so a node nobody
// reads has no effect. Unused values are compacted away; inputs stay (the
// caller binds them by position), even when nothing reads them.
#pragma once

#include "trace/graph.h"

namespace tandem::trace {

// Returns the number of nodes removed.
int eliminate_dead_code(Graph& graph);

}  // namespace tandem::trace
