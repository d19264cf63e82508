// Common-subexpression elimination: two nodes with the same op, the same
// attributes and the same inputs compute the same values (ops are pure and
// deterministic), so the later one is dropped and its readers read the
// earlier one's outputs. Ops that draw random numbers are pure too (their
// seed is an attribute), so two dropout calls with different seeds stay
// apart and two with the same seed are the same mask.
#pragma once

#include "trace/graph.h"

namespace tandem::trace {

// Returns the number of nodes removed.
int eliminate_common_subexpressions(Graph& graph);

}  // namespace tandem::trace
