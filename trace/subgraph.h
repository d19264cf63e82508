// extract_subgraph: a new graph made of some nodes of another, with chosen
// values as its inputs and outputs. How a hybridized block's traced
// forward-and-backward graph is cut into a forward graph and a backward graph
// (eager/differentiable_graph.h).
#pragma once

#include <vector>

#include "trace/graph.h"

namespace tandem::trace {

// `nodes`: indices into graph.nodes, in order. `inputs`: values of `graph`
// (inputs or node outputs) that become the new graph's inputs, with their
// names and kinds (a kConstant entry keeps its tensor). `outputs`: values of
// `graph` the new graph returns. Every value a kept node reads must be an
// input or an output of a kept node; tandem::Error otherwise.
Graph extract_subgraph(const Graph& graph, const std::vector<int>& nodes,
                       const std::vector<GraphInput>& inputs,
                       const std::vector<GraphOutput>& outputs);

// The indices of the nodes that `outputs` depend on, in order; nodes in
// `stop` (and what only they need) are left out.
std::vector<int> nodes_needed_for(const Graph& graph, const std::vector<ValueId>& outputs,
                                  const std::vector<bool>& stop = {});

}  // namespace tandem::trace
