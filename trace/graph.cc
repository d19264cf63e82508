#include "trace/graph.h"

#include <utility>

#include "core/error.h"
#include "kernels/arity.h"

namespace tandem::trace {

ValueId Graph::add_input(std::string name, InputKind kind, Shape shape, DType dtype) {
  auto id = static_cast<ValueId>(values.size());
  values.push_back({std::move(shape), dtype, -1, 0});
  inputs.push_back({id, std::move(name), kind, Tensor()});
  return id;
}

ValueId Graph::add_constant(std::string name, Tensor value) {
  ValueId id = add_input(std::move(name), InputKind::kConstant, value.shape(), value.dtype());
  inputs.back().constant = std::move(value);
  return id;
}

std::vector<ValueId> Graph::add_node(const kernels::OpDef& op, const kernels::Attrs& attrs,
                                     std::vector<ValueId> node_inputs, std::source_location where,
                                     std::string scope) {
  CallSiteScope site(op.name.c_str(), where);
  kernels::check_input_count(op, node_inputs.size());
  kernels::Attrs resolved = kernels::resolve_attrs(op, attrs);
  kernels::TensorMetas metas;
  metas.reserve(node_inputs.size());
  for (ValueId id : node_inputs) metas.push_back(meta(id));
  kernels::TensorMetas inferred = op.infer(metas, resolved);
  return add_node(op, std::move(resolved), std::move(node_inputs), inferred, where,
                  std::move(scope));
}

std::vector<ValueId> Graph::add_node(const kernels::OpDef& op, kernels::Attrs attrs,
                                     std::vector<ValueId> node_inputs,
                                     absl::Span<const kernels::TensorMeta> node_outputs,
                                     std::source_location where, std::string scope) {
  int index = static_cast<int>(nodes.size());
  Node node{&op, std::move(attrs), std::move(node_inputs), {}, where, std::move(scope)};
  for (size_t k = 0; k < node_outputs.size(); ++k) {
    node.outputs.push_back(static_cast<ValueId>(values.size()));
    values.push_back({node_outputs[k].shape, node_outputs[k].dtype, index, static_cast<int>(k)});
  }
  nodes.push_back(std::move(node));
  return nodes.back().outputs;
}

void Graph::add_output(ValueId value, std::string name) {
  outputs.push_back({value, std::move(name)});
}

void Graph::relink() {
  for (Value& v : values) v.node = -1;
  for (size_t n = 0; n < nodes.size(); ++n) {
    for (size_t k = 0; k < nodes[n].outputs.size(); ++k) {
      Value& v = values[static_cast<size_t>(nodes[n].outputs[k])];
      v.node = static_cast<int>(n);
      v.output_index = static_cast<int>(k);
    }
  }
}

void Graph::compact() {
  std::vector<ValueId> renumber(values.size(), -1);
  std::vector<Value> kept;
  auto keep = [&](ValueId& id) {
    auto& slot = renumber[static_cast<size_t>(id)];
    if (slot < 0) {
      slot = static_cast<ValueId>(kept.size());
      kept.push_back(values[static_cast<size_t>(id)]);
    }
    id = slot;
  };
  // Inputs first, then node outputs in order: the numbering reads top-down.
  for (GraphInput& input : inputs) keep(input.value);
  for (Node& node : nodes) {
    for (ValueId& id : node.outputs) keep(id);
  }
  for (Node& node : nodes) {
    for (ValueId& id : node.inputs) id = renumber[static_cast<size_t>(id)];
  }
  for (GraphOutput& output : outputs) output.value = renumber[static_cast<size_t>(output.value)];
  values = std::move(kept);
  relink();
}

}  // namespace tandem::trace
