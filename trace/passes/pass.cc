#include "trace/passes/pass.h"

#include "core/error.h"

namespace tandem::trace {

int FixedPoint::run(Graph& graph) {
  int changes = 0;
  for (int round = 1;; ++round) {
    const int changed = pass_->run(graph);
    if (changed == 0) return changes;
    changes += changed;
    TANDEM_INTERNAL_ASSERT(round < kMaxRounds, "the pass '", pass_->name(),
                           "' still changes the graph after ", kMaxRounds, " runs");
  }
}

}  // namespace tandem::trace
