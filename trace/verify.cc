// verify(): the invariants every pass may assume and must keep (graph.h).
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"

#include "core/error.h"
#include "trace/graph.h"

namespace tandem::trace {
namespace {

[[noreturn]] void fail(std::string_view stage, const std::string& what, const Node* node = nullptr,
                       int index = -1) {
  std::string op = node != nullptr ? node->op->name : std::string();
  std::string message = str_cat("invalid graph (", stage, "): ", what);
  if (node != nullptr) message = str_cat(message, " [node ", index, "]");
  throw Error(std::move(message), std::move(op),
              node != nullptr ? node->where : std::source_location{},
              node != nullptr ? node->scope : std::string());
}

std::string meta_string(const kernels::TensorMeta& meta) {
  return str_cat(dtype_name(meta.dtype), meta.shape.to_string());
}

}  // namespace

void verify(const Graph& graph, std::string_view stage) {
  const auto num_values = static_cast<ValueId>(graph.values.size());
  std::vector<bool> written(graph.values.size(), false);
  auto in_range = [&](ValueId id) { return id >= 0 && id < num_values; };

  absl::flat_hash_set<std::string> names;
  for (const GraphInput& input : graph.inputs) {
    if (!in_range(input.value))
      fail(stage,
           str_cat("input '", input.name, "' refers to value %", input.value, " of ", num_values));
    if (!names.insert(input.name).second)
      fail(stage, str_cat("two inputs are named '", input.name, "'"));
    if (written[input.value])
      fail(stage, str_cat("value %", input.value, " is written twice (input '", input.name, "')"));
    written[input.value] = true;
    const bool has_constant = input.constant.defined();
    if (has_constant != (input.kind == InputKind::kConstant))
      fail(stage, str_cat("input '", input.name, "' is ",
                          has_constant ? "not a constant but holds a value"
                                       : "a constant without a value"));
    if (has_constant && (input.constant.shape() != graph.value(input.value).shape ||
                         input.constant.dtype() != graph.value(input.value).dtype))
      fail(stage, str_cat("constant '", input.name, "' holds ", dtype_name(input.constant.dtype()),
                          input.constant.shape().to_string(), " but its value is declared ",
                          meta_string(graph.meta(input.value))));
  }

  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    const int index = static_cast<int>(n);
    if (node.op == nullptr) fail(stage, str_cat("node ", n, " has no op"));
    const kernels::OpDef& op = *node.op;
    const int num_inputs = static_cast<int>(node.inputs.size());
    if (op.num_inputs == kernels::kVariadic ? num_inputs == 0 : num_inputs != op.num_inputs) {
      fail(stage,
           str_cat("has ", num_inputs, " inputs, the op takes ",
                   op.num_inputs == kernels::kVariadic ? std::string("at least 1")
                                                       : std::to_string(op.num_inputs)),
           &node, index);
    }
    kernels::TensorMetas metas;
    for (ValueId id : node.inputs) {
      if (!in_range(id))
        fail(stage, str_cat("reads value %", id, ", which does not exist"), &node, index);
      // Values are written before they are read: together with "written
      // once" this makes the node order a topological order, so no cycle.
      if (!written[id])
        fail(stage,
             str_cat("reads value %", id,
                     " before any node writes it (a cycle, or nodes out of order)"),
             &node, index);
      metas.push_back(graph.meta(id));
    }
    if (op.num_outputs != kernels::kVariadic &&
        static_cast<int>(node.outputs.size()) != op.num_outputs) {
      fail(stage, str_cat("has ", node.outputs.size(), " outputs, the op makes ", op.num_outputs),
           &node, index);
    }
    for (ValueId id : node.outputs) {
      if (!in_range(id))
        fail(stage, str_cat("writes value %", id, ", which does not exist"), &node, index);
      if (written[id])
        fail(stage, str_cat("writes value %", id, ", which is already written"), &node, index);
      written[id] = true;
    }
    kernels::TensorMetas inferred;
    try {
      CallSiteScope site(op.name.c_str(), node.where);
      NameScope scope(node.scope, node.where);
      kernels::Attrs resolved = kernels::resolve_attrs(op, node.attrs);
      if (!(resolved == node.attrs))
        fail(stage,
             str_cat("attributes ", node.attrs.to_string(), " are not resolved (expected ",
                     resolved.to_string(), ")"),
             &node, index);
      inferred = op.infer(metas, resolved);
    } catch (const Error& e) {
      fail(stage, str_cat("inputs or attributes rejected by the op: ", e.message()), &node, index);
    }
    if (inferred.size() != node.outputs.size()) {
      fail(stage,
           str_cat("the op infers ", inferred.size(), " outputs, the node has ",
                   node.outputs.size()),
           &node, index);
    }
    for (size_t k = 0; k < inferred.size(); ++k) {
      kernels::TensorMeta declared = graph.meta(node.outputs[k]);
      if (declared.shape != inferred[k].shape || declared.dtype != inferred[k].dtype) {
        fail(stage,
             str_cat("output ", k, " is declared ", meta_string(declared), " but the op infers ",
                     meta_string(inferred[k])),
             &node, index);
      }
    }
  }

  for (const GraphOutput& output : graph.outputs) {
    if (!in_range(output.value) || !written[output.value]) {
      fail(stage, str_cat("output '", output.name, "' refers to value %", output.value,
                          ", which no input or node writes"));
    }
  }
}

}  // namespace tandem::trace
