#include "trace/passes/elementwise_fusion.h"

#include <charconv>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/error.h"
#include "kernels/known_ops.h"
#include "kernels/registry.h"

namespace tandem::trace {
namespace {

bool is_fusable(const Graph& graph, const Node& node) {
  // The ops fused_elementwise has instructions for (kernels/elementwise_ops.h);
  // their float attributes become the instruction's parameters (Note [Fused
  // elementwise programs] in kernels/ops/fused_elementwise.cc).
  const kernels::ElementwiseInfo* info = node.op->elementwise;
  if (info == nullptr || !info->fusable || node.outputs.size() != 1) return false;
  const Value& out = graph.value(node.outputs[0]);
  if (out.dtype != DType::kFloat32 && out.dtype != DType::kFloat64) return false;
  for (ValueId id : node.inputs) {
    const Value& in = graph.value(id);
    if (in.shape != out.shape && in.shape.numel() != 1) return false;
  }
  for (const auto& [name, value] : node.attrs.items()) {
    if (!std::holds_alternative<double>(value)) return false;
  }
  return true;
}

// The shortest text that reads back as exactly `value` (std::from_chars).
std::string number(double value) {
  char buffer[64];
  auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  TANDEM_INTERNAL_ASSERT(error == std::errc(), "formatting ", value);
  return std::string(buffer, end);
}

// Replaces `members` (in node order; the last is the group's root) by one
// fused_elementwise node.
Node fuse(const Graph& graph, const std::vector<int>& members) {
  absl::flat_hash_map<ValueId, int> register_of, input_of;
  std::vector<ValueId> inputs;
  std::string program;
  for (int n : members) {
    const Node& node = graph.nodes[static_cast<size_t>(n)];
    const int r = static_cast<int>(register_of.size());
    program += str_cat(program.empty() ? "" : ";", "r", r, "=", node.op->name, "(");
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      ValueId id = node.inputs[k];
      std::string operand;
      if (auto it = register_of.find(id); it != register_of.end()) {
        operand = str_cat("r", it->second);
      } else {
        auto [at, added] = input_of.try_emplace(id, static_cast<int>(inputs.size()));
        if (added) inputs.push_back(id);
        operand = str_cat("i", at->second);
      }
      program += str_cat(k == 0 ? "" : ",", operand);
    }
    for (const auto& [name, value] : node.attrs.items()) {
      program += str_cat(",", name, "=", number(std::get<double>(value)));
    }
    program += ")";
    register_of[node.outputs[0]] = r;
  }
  const Node& root = graph.nodes[static_cast<size_t>(members.back())];
  const kernels::OpDef& op = kernels::fused_elementwise_op();
  kernels::Attrs attrs = kernels::resolve_attrs(op, {{"program", std::move(program)}});
  kernels::TensorMetas metas;
  for (ValueId id : inputs) metas.push_back(graph.meta(id));
  kernels::TensorMetas inferred = op.infer(metas, attrs);
  const Value& out = graph.value(root.outputs[0]);
  TANDEM_INTERNAL_ASSERT(inferred[0].shape == out.shape && inferred[0].dtype == out.dtype,
                         "fused group infers ", inferred[0].shape.to_string(), ", its last node ",
                         out.shape.to_string());
  return Node{&op, std::move(attrs), std::move(inputs), root.outputs, root.where, root.scope};
}

}  // namespace

int ElementwiseFusion::run(Graph& graph) {
  const size_t num_nodes = graph.nodes.size();
  std::vector<std::vector<int>> readers(graph.values.size());
  for (size_t n = 0; n < num_nodes; ++n) {
    for (ValueId id : graph.nodes[n].inputs) readers[id].push_back(static_cast<int>(n));
  }
  std::vector<bool> is_output(graph.values.size(), false);
  for (const GraphOutput& output : graph.outputs) is_output[output.value] = true;

  // Each fusable node's group, named by its root (the node whose value
  // leaves the group). Walking backwards, every reader of a node has its
  // group already; the node joins its readers' group when they all share
  // one and its value goes nowhere else. Values then leave a group only
  // through its root, so replacing the group by one node at the root's place
  // keeps the order a dependency order.
  std::vector<int> group(num_nodes, -1);
  for (size_t n = num_nodes; n-- > 0;) {
    const Node& node = graph.nodes[n];
    if (!is_fusable(graph, node)) continue;
    group[n] = static_cast<int>(n);
    ValueId v = node.outputs[0];
    if (is_output[v] || readers[v].empty()) continue;
    const int g = group[static_cast<size_t>(readers[v][0])];
    if (g < 0) continue;
    bool all_in_group = true;
    for (int r : readers[v]) all_in_group = all_in_group && group[static_cast<size_t>(r)] == g;
    const Value& root_out = graph.value(graph.nodes[static_cast<size_t>(g)].outputs[0]);
    if (all_in_group && graph.value(v).shape == root_out.shape &&
        graph.value(v).dtype == root_out.dtype) {
      group[n] = g;
    }
  }

  std::vector<std::vector<int>> members(num_nodes);
  for (size_t n = 0; n < num_nodes; ++n) {
    if (group[n] >= 0) members[static_cast<size_t>(group[n])].push_back(static_cast<int>(n));
  }
  std::vector<Node> kept;
  kept.reserve(num_nodes);
  for (size_t n = 0; n < num_nodes; ++n) {
    const int g = group[n];
    if (g < 0 || members[static_cast<size_t>(g)].size() < 2) {
      kept.push_back(std::move(graph.nodes[n]));
    } else if (g == static_cast<int>(n)) {
      kept.push_back(fuse(graph, members[n]));
    }
  }
  const int removed = static_cast<int>(num_nodes - kept.size());
  graph.nodes = std::move(kept);  // Every node moved into `kept`, fused or not.
  graph.relink();
  graph.compact();
  return removed;
}

}  // namespace tandem::trace
