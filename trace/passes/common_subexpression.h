// Common-subexpression elimination: two nodes with the same op, the same
// attributes and the same inputs (in any order, for an op whose elementwise
// trait says it is commutative: add, mul) compute the same values (ops are
// pure and deterministic), so the later one is dropped and its readers read
// the earlier one's outputs. Ops that draw random numbers are pure too (their
// seed is an attribute), so two dropout calls with different seeds stay
// apart and two with the same seed are the same mask.
#pragma once

#include <string_view>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

// Counts the nodes removed.
class CommonSubexpressionElimination final : public Pass {
 public:
  std::string_view name() const override { return "cse"; }
  int run(Graph& graph) override;
};

}  // namespace tandem::trace
