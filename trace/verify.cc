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

namespace {

// One verify() call: walks the inputs, the nodes in order and the outputs,
// tracking which values are written so far.
class Verifier {
 public:
  Verifier(const Graph& graph, std::string_view stage)
      : graph_(graph), stage_(stage), written_(graph.values.size(), false) {}

  void run() {
    check_inputs();
    for (size_t n = 0; n < graph_.nodes.size(); ++n)
      check_node(graph_.nodes[n], static_cast<int>(n));
    check_outputs();
  }

 private:
  bool in_range(ValueId id) const {
    return id >= 0 && static_cast<size_t>(id) < graph_.values.size();
  }

  void check_inputs() {
    absl::flat_hash_set<std::string> names;
    for (const GraphInput& input : graph_.inputs) {
      if (!in_range(input.value))
        fail(stage_, str_cat("input '", input.name, "' refers to value %", input.value, " of ",
                             graph_.values.size()));
      if (!names.insert(input.name).second)
        fail(stage_, str_cat("two inputs are named '", input.name, "'"));
      if (written_[input.value])
        fail(stage_,
             str_cat("value %", input.value, " is written twice (input '", input.name, "')"));
      written_[input.value] = true;
      const bool has_constant = input.constant.defined();
      if (has_constant != (input.kind == InputKind::kConstant))
        fail(stage_, str_cat("input '", input.name, "' is ",
                             has_constant ? "not a constant but holds a value"
                                          : "a constant without a value"));
      if (has_constant && (input.constant.shape() != graph_.value(input.value).shape ||
                           input.constant.dtype() != graph_.value(input.value).dtype))
        fail(stage_, str_cat("constant '", input.name, "' holds ",
                             dtype_name(input.constant.dtype()), input.constant.shape().to_string(),
                             " but its value is declared ", meta_string(graph_.meta(input.value))));
    }
  }

  // Arity, reads of written values, outputs written once, then types.
  void check_node(const Node& node, int index) {
    if (node.op == nullptr) fail(stage_, str_cat("node ", index, " has no op"));
    const kernels::OpDef& op = *node.op;
    const int num_inputs = static_cast<int>(node.inputs.size());
    if (op.num_inputs == kernels::kVariadic ? num_inputs == 0 : num_inputs != op.num_inputs) {
      fail(stage_,
           str_cat("has ", num_inputs, " inputs, the op takes ",
                   op.num_inputs == kernels::kVariadic ? std::string("at least 1")
                                                       : std::to_string(op.num_inputs)),
           &node, index);
    }
    kernels::TensorMetas metas;
    for (ValueId id : node.inputs) {
      if (!in_range(id))
        fail(stage_, str_cat("reads value %", id, ", which does not exist"), &node, index);
      // Values are written before they are read: together with "written
      // once" this makes the node order a topological order, so no cycle.
      if (!written_[id])
        fail(stage_,
             str_cat("reads value %", id,
                     " before any node writes it (a cycle, or nodes out of order)"),
             &node, index);
      metas.push_back(graph_.meta(id));
    }
    if (op.num_outputs != kernels::kVariadic &&
        static_cast<int>(node.outputs.size()) != op.num_outputs) {
      fail(stage_, str_cat("has ", node.outputs.size(), " outputs, the op makes ", op.num_outputs),
           &node, index);
    }
    for (ValueId id : node.outputs) {
      if (!in_range(id))
        fail(stage_, str_cat("writes value %", id, ", which does not exist"), &node, index);
      if (written_[id])
        fail(stage_, str_cat("writes value %", id, ", which is already written"), &node, index);
      written_[id] = true;
    }
    check_types(node, index, metas);
  }

  // Resolved attributes, and output types as the op infers them from `inputs`.
  void check_types(const Node& node, int index, const kernels::TensorMetas& inputs) const {
    const kernels::OpDef& op = *node.op;
    kernels::TensorMetas inferred;
    try {
      CallSiteScope site(op.name.c_str(), node.where);
      NameScope scope(node.scope, node.where);
      kernels::Attrs resolved = kernels::resolve_attrs(op, node.attrs);
      if (!(resolved == node.attrs))
        fail(stage_,
             str_cat("attributes ", node.attrs.to_string(), " are not resolved (expected ",
                     resolved.to_string(), ")"),
             &node, index);
      inferred = op.infer(inputs, resolved);
    } catch (const Error& e) {
      fail(stage_, str_cat("inputs or attributes rejected by the op: ", e.message()), &node, index);
    }
    if (inferred.size() != node.outputs.size()) {
      fail(stage_,
           str_cat("the op infers ", inferred.size(), " outputs, the node has ",
                   node.outputs.size()),
           &node, index);
    }
    for (size_t k = 0; k < inferred.size(); ++k) {
      kernels::TensorMeta declared = graph_.meta(node.outputs[k]);
      if (declared.shape != inferred[k].shape || declared.dtype != inferred[k].dtype) {
        fail(stage_,
             str_cat("output ", k, " is declared ", meta_string(declared), " but the op infers ",
                     meta_string(inferred[k])),
             &node, index);
      }
    }
  }

  void check_outputs() const {
    for (const GraphOutput& output : graph_.outputs) {
      if (!in_range(output.value) || !written_[output.value]) {
        fail(stage_, str_cat("output '", output.name, "' refers to value %", output.value,
                             ", which no input or node writes"));
      }
    }
  }

  const Graph& graph_;
  std::string_view stage_;
  std::vector<bool> written_;
};

}  // namespace

void verify(const Graph& graph, std::string_view stage) { Verifier(graph, stage).run(); }

}  // namespace tandem::trace
