#include "trace/passes/activation_fusion.h"

#include <string>
#include <utility>
#include <vector>

#include "kernels/registry.h"

namespace tandem::trace {
namespace {

// The ops the layers' "activation" attribute may name (Note [Fused
// activation] in kernels/cpu/onednn.h): those with a oneDNN post-op, whose
// parameter (if any) travels as the layer's "alpha".
bool is_fusable_activation(const kernels::OpDef* activation) {
  const kernels::ElementwiseInfo* info = activation->elementwise;
  return info != nullptr && info->post_op.algorithm != kernels::PostOpAlgorithm::kNone &&
         info->num_params <= 1;
}

}  // namespace

int ActivationFusion::run(Graph& graph) {
  std::vector<int> readers(graph.values.size(), 0);
  std::vector<int> reader(graph.values.size(), -1);  // The last reading node.
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    for (ValueId id : graph.nodes[n].inputs) {
      ++readers[id];
      reader[id] = static_cast<int>(n);
    }
  }
  for (const GraphOutput& output : graph.outputs) ++readers[output.value];

  std::vector<bool> removed(graph.nodes.size(), false);
  int count = 0;
  for (Node& layer : graph.nodes) {
    // The layers that apply an activation themselves say so in their schema.
    if (!kernels::has_attr(*layer.op, "activation")) continue;
    if (layer.attrs.get_string("activation") != "none") continue;
    const ValueId h = layer.outputs[0];
    // One reader in all, and it is a node (so not a graph output).
    if (readers[h] != 1 || reader[h] < 0) continue;
    const size_t a = static_cast<size_t>(reader[h]);
    const Node& activation = graph.nodes[a];
    if (!is_fusable_activation(activation.op)) continue;
    const Value& in = graph.value(h);
    const Value& out = graph.value(activation.outputs[0]);
    if (in.dtype != DType::kFloat32 || out.dtype != in.dtype || out.shape != in.shape) continue;

    layer.attrs.set("activation", activation.op->name);
    const kernels::ElementwiseInfo& info = *activation.op->elementwise;
    if (info.num_params == 1) {
      layer.attrs.set("alpha", activation.attrs.get_float(std::string(info.params[0].name)));
    }
    layer.outputs[0] = activation.outputs[0];
    removed[a] = true;
    ++count;
  }
  if (count == 0) return 0;

  std::vector<Node> kept;
  kept.reserve(graph.nodes.size() - static_cast<size_t>(count));
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (!removed[n]) kept.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(kept);
  graph.relink();
  graph.compact();  // Drops the pre-activation values.
  return count;
}

}  // namespace tandem::trace
