#include "trace/passes/common_subexpression.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"

namespace tandem::trace {
namespace {

// A node's inputs as cse compares them: in order, or sorted for a
// commutative op, so that add(a, b) and add(b, a) are one computation.
std::vector<ValueId> operands_of(const Node& node) {
  std::vector<ValueId> operands = node.inputs;
  const kernels::ElementwiseInfo* info = node.op->elementwise;
  if (info != nullptr && info->commutative) std::sort(operands.begin(), operands.end());
  return operands;
}

}  // namespace

int CommonSubexpressionElimination::run(Graph& graph) {
  // Every value a removed node wrote is replaced by its twin's.
  std::vector<ValueId> replacement(graph.values.size());
  for (size_t id = 0; id < replacement.size(); ++id) replacement[id] = static_cast<ValueId>(id);

  // Candidates are found by a text key of op, operands and attributes. The
  // key holds the op and operands exactly; attribute text rounds floats, so
  // the attributes of candidates are compared again.
  absl::flat_hash_map<std::string, std::vector<int>> with_key;
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (Node& node : graph.nodes) {
    for (ValueId& id : node.inputs) id = replacement[id];
    if (node.op->collective) {
      // Every process must run the same collectives: two that look alike
      // here may differ in another process's graph (its constants differ).
      kept.push_back(std::move(node));
      continue;
    }
    const std::vector<ValueId> operands = operands_of(node);
    std::string key = str_cat(node.op->name, "(");
    for (ValueId id : operands) key += str_cat(id, ",");
    key += str_cat(")", node.attrs.to_string());
    std::vector<int>& candidates = with_key[key];
    const Node* twin = nullptr;
    for (int c : candidates) {
      const Node& other = kept[static_cast<size_t>(c)];
      if (other.attrs == node.attrs) {
        twin = &other;
        break;
      }
    }
    if (twin == nullptr) {
      candidates.push_back(static_cast<int>(kept.size()));
      kept.push_back(std::move(node));
      continue;
    }
    for (size_t k = 0; k < node.outputs.size(); ++k)
      replacement[node.outputs[k]] = twin->outputs[k];
  }
  const int removed = static_cast<int>(graph.nodes.size() - kept.size());
  graph.nodes = std::move(kept);
  for (GraphOutput& output : graph.outputs) output.value = replacement[output.value];
  graph.compact();
  return removed;
}

}  // namespace tandem::trace
