#include "trace/subgraph.h"

#include "absl/container/flat_hash_map.h"

#include "core/error.h"

namespace tandem::trace {

Graph extract_subgraph(const Graph& graph, const std::vector<int>& nodes,
                       const std::vector<GraphInput>& inputs,
                       const std::vector<GraphOutput>& outputs) {
  Graph out;
  absl::flat_hash_map<ValueId, ValueId> new_id;
  for (const GraphInput& input : inputs) {
    const Value& v = graph.value(input.value);
    new_id[input.value] = input.kind == InputKind::kConstant
                              ? out.add_constant(input.name, input.constant)
                              : out.add_input(input.name, input.kind, v.shape, v.dtype);
  }
  auto map = [&](ValueId id) {
    auto it = new_id.find(id);
    TANDEM_INTERNAL_ASSERT(it != new_id.end(), "extract_subgraph: value %", id,
                           " is read but neither an input nor made by a kept node");
    return it->second;
  };
  for (int n : nodes) {
    const Node& node = graph.nodes[static_cast<size_t>(n)];
    std::vector<ValueId> ins;
    for (ValueId id : node.inputs) ins.push_back(map(id));
    kernels::TensorMetas metas;
    for (ValueId id : node.outputs) metas.push_back(graph.meta(id));
    std::vector<ValueId> made =
        out.add_node(*node.op, node.attrs, std::move(ins), metas, node.where, node.scope);
    for (size_t k = 0; k < made.size(); ++k) new_id[node.outputs[k]] = made[k];
  }
  for (const GraphOutput& output : outputs) out.add_output(map(output.value), output.name);
  return out;
}

std::vector<int> nodes_needed_for(const Graph& graph, const std::vector<ValueId>& outputs,
                                  const std::vector<bool>& stop) {
  std::vector<bool> needed_value(graph.values.size(), false);
  for (ValueId id : outputs) needed_value[id] = true;
  std::vector<bool> needed_node(graph.nodes.size(), false);
  for (size_t n = graph.nodes.size(); n-- > 0;) {
    if (!stop.empty() && stop[n]) continue;
    for (ValueId id : graph.nodes[n].outputs) needed_node[n] = needed_node[n] || needed_value[id];
    if (!needed_node[n]) continue;
    for (ValueId id : graph.nodes[n].inputs) needed_value[id] = true;
  }
  std::vector<int> result;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (needed_node[n]) result.push_back(static_cast<int>(n));
  }
  return result;
}

}  // namespace tandem::trace
