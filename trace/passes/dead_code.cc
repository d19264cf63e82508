#include "trace/passes/dead_code.h"

#include <vector>

namespace tandem::trace {

int DeadCodeElimination::run(Graph& graph) {
  std::vector<bool> live_value(graph.values.size(), false);
  for (const GraphOutput& output : graph.outputs) live_value[output.value] = true;
  std::vector<bool> live_node(graph.nodes.size(), false);
  // Nodes are in dependency order, so one backward sweep finds every node
  // that feeds a live value.
  for (size_t n = graph.nodes.size(); n-- > 0;) {
    const Node& node = graph.nodes[n];
    for (ValueId id : node.outputs) live_node[n] = live_node[n] || live_value[id];
    if (!live_node[n]) continue;
    for (ValueId id : node.inputs) live_value[id] = true;
  }
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (live_node[n]) kept.push_back(std::move(graph.nodes[n]));
  }
  std::vector<GraphInput> inputs;
  inputs.reserve(graph.inputs.size());
  for (GraphInput& input : graph.inputs) {
    if (input.kind != InputKind::kConstant || live_value[input.value]) {
      inputs.push_back(std::move(input));
    }
  }
  const int removed =
      static_cast<int>(graph.nodes.size() - kept.size() + graph.inputs.size() - inputs.size());
  graph.nodes = std::move(kept);
  graph.inputs = std::move(inputs);
  graph.compact();
  return removed;
}

}  // namespace tandem::trace
