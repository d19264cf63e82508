// A dynamic batch dimension: how a graph traced at one batch size runs at
// another (serialization/FORMAT.md, "dynamic_dims").
//
//   generalize_batch(graph, /*batch=*/64);          // at export
//   trace::Graph g = with_input_shapes(graph, {Shape{8, 1, 28, 28}});  // at load
//
// A trace records concrete shapes: flatten of a [64, 32, 7, 7] batch becomes
// reshape to [64, 1568]. Replaying that at batch 8 would fail, so the
// exporter rewrites such shape attributes to follow the batch (reshape to
// [-1, 1568]), then checks the result by inferring every node again at
// another batch size. A graph whose ops pin the batch in a way this cannot
// undo (a reshape that folds the batch into another dimension) is refused
// there, naming the node, rather than exported with a batch dimension that
// would fail later. At load, a new batch size re-infers the graph's shapes
// and plans it afresh.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "core/shape.h"
#include "trace/graph.h"

namespace tandem::serialization {

// Rewrites the "shape" attributes of reshape and expand nodes whose target
// spells `batch` in dimension 0 of a value that carries the batch, so that
// they keep dimension 0 instead, and a slice of all rows of such a value to
// "all rows". Data inputs carry the batch in dimension 0. Throws
// tandem::Error naming the node and its traced line for a slice of some rows
// of the batch, or a split of it: those fix rows that eager code would
// choose anew at another batch size, so the graph would run there and give
// other answers.
void generalize_batch(trace::Graph& graph, int64_t batch);

// `graph` with its data inputs (in order) given `data_shapes`, and every
// node's outputs inferred again from them. Throws tandem::Error naming the
// node, its op and `sources[node]` (the traced line) if an op refuses.
trace::Graph with_input_shapes(const trace::Graph& graph, absl::Span<const Shape> data_shapes,
                               absl::Span<const std::string> sources);

}  // namespace tandem::serialization
