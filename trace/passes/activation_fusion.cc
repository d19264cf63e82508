#include "trace/passes/activation_fusion.h"

#include <string>
#include <utility>
#include <vector>

namespace tandem::trace {
namespace {

const kernels::OpDef& op(const char* name) { return kernels::Registry::global().get(name); }

// The activation ops the layers' "activation" attribute names; each is the op
// of the same name.
bool is_fusable_activation(const kernels::OpDef* activation) {
  for (const char* name : {"relu", "gelu", "sigmoid", "tanh", "leaky_relu"}) {
    if (activation == &op(name)) return true;
  }
  return false;
}

}  // namespace

int fuse_activations(Graph& graph) {
  const kernels::OpDef* conv2d = &op("conv2d");
  const kernels::OpDef* linear = &op("linear");

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
    if (layer.op != conv2d && layer.op != linear) continue;
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
    if (activation.attrs.has("alpha")) {
      layer.attrs.set("alpha", activation.attrs.get_float("alpha"));
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
