#include "trace/passes/constant_folding.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"

#include "core/error.h"
#include "kernels/dispatch.h"

namespace tandem::trace {
namespace {

bool small_enough(const Graph& graph, const Node& node) {
  for (ValueId id : node.outputs) {
    if (graph.value(id).shape.numel() > kMaxFoldedElements) return false;
  }
  return true;
}

// Runs every node whose inputs are all known (and whose outputs are small,
// not random, not collectives and not graph outputs), adding its results to
// `known`.
// Returns which nodes ran.
std::vector<bool> evaluate_known_nodes(const Graph& graph, std::vector<Tensor>& known) {
  std::vector<bool> is_output(graph.values.size(), false);
  for (const GraphOutput& output : graph.outputs) is_output[output.value] = true;
  std::vector<bool> folded(graph.nodes.size(), false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    // A collective's result depends on the other processes, not only on its
    // inputs: it runs when the graph runs, with them.
    if (kernels::is_random(*node.op) || node.op->collective || !small_enough(graph, node)) {
      continue;
    }
    bool foldable = true;
    for (ValueId id : node.inputs) foldable = foldable && known[id].defined();
    for (ValueId id : node.outputs) foldable = foldable && !is_output[id];
    if (!foldable) continue;
    std::vector<Tensor> args;
    args.reserve(node.inputs.size());
    for (ValueId id : node.inputs) args.push_back(known[id]);
    // Errors name the user's traced line and module, as at replay.
    NameScope scope(node.scope, node.where);
    std::vector<Tensor> results = kernels::call(*node.op, args, node.attrs, node.where);
    for (size_t k = 0; k < results.size(); ++k) {
      // Waiting here surfaces a kernel failure now, naming the node, rather
      // than at some later call of the graph.
      results[k].wait_to_read(node.where);
      known[node.outputs[k]] = std::move(results[k]);
    }
    folded[n] = true;
  }
  return folded;
}

// Drops the folded nodes. A folded value becomes a constant input only if a
// kept node reads it.
void replace_folded_nodes(Graph& graph, const std::vector<bool>& folded,
                          const std::vector<Tensor>& known) {
  absl::flat_hash_set<std::string> names;
  for (const GraphInput& input : graph.inputs) names.insert(input.name);
  std::vector<ValueId> replacement(graph.values.size(), -1);
  std::vector<Node> kept;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (folded[n]) continue;
    Node& node = graph.nodes[n];
    for (ValueId& id : node.inputs) {
      const Value& v = graph.value(id);
      if (v.node < 0 || !folded[static_cast<size_t>(v.node)]) continue;
      if (replacement[id] < 0) {
        const Node& producer = graph.nodes[static_cast<size_t>(v.node)];
        // Input names are unique (verify checks); a graph optimized twice
        // may already hold a constant of the same name.
        std::string name = str_cat(producer.op->name, ".", id, ".folded");
        for (int k = 1; names.contains(name); ++k)
          name = str_cat(producer.op->name, ".", id, ".folded", k);
        names.insert(name);
        replacement[id] = graph.add_constant(std::move(name), known[id]);
      }
      id = replacement[id];
    }
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
  graph.compact();
}

}  // namespace

int ConstantFolding::run(Graph& graph) {
  // The value of every value known at optimization time: constant inputs,
  // then the outputs of folded nodes.
  std::vector<Tensor> known(graph.values.size());
  for (const GraphInput& input : graph.inputs) {
    if (input.kind == InputKind::kConstant) known[input.value] = input.constant;
  }
  const std::vector<bool> folded = evaluate_known_nodes(graph, known);
  const int count = static_cast<int>(std::count(folded.begin(), folded.end(), true));
  if (count > 0) replace_folded_nodes(graph, folded, known);
  return count;
}

}  // namespace tandem::trace
